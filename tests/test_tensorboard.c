/* TensorBoard event files: the writer's records read back by the project's reader
 * (CRCs, tags, values), truncated files read up to their last whole record, corrupt
 * CRCs reported; a short training run's --logdir and --metrics output. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/model.h"
#include "obs/tensorboard.h"
#include "obs/tfrecord.h"
#include "tb_reader.h"
#include "testutil.h"

/* The one events.out.tfevents.* file in dir (malloc'd path). */
static char *find_event_file(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    char *found = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            n++;
            free(found);
            assert_true(asprintf(&found, "%s/%s", dir, e->d_name) > 0);
        }
    }
    closedir(d);
    assert_int_equal(n, 1);
    return found;
}

/* Reads every event; returns how many, with *truncated as the reader left it. */
static int count_events(const char *path, bool *truncated)
{
    herd_tb_reader *r;
    assert_herd_ok(herd_tb_reader_open(path, &r));
    int n = 0;
    for (;;) {
        Tensorboard__Event *ev;
        assert_herd_ok(herd_tb_reader_next(r, &ev, truncated));
        if (!ev)
            break;
        herd_tb_event_free(ev);
        n++;
    }
    herd_tb_reader_close(r);
    return n;
}

static void test_crc32c(void **state)
{
    (void)state;
    /* The standard check value of CRC-32C (RFC 3720's polynomial). */
    assert_int_equal(herd_crc32c("123456789", 9), 0xe3069283u);
    assert_int_equal(herd_crc32c("", 0), 0);
}

/* Writes the file_version, 3 scalar events and one histogram into dir. */
static char *write_sample(const char *dir)
{
    herd_tb_writer *w;
    assert_herd_ok(herd_tb_writer_open(dir, &w));
    char *path = strdup(herd_tb_writer_path(w));
    for (long step = 1; step <= 3; step++) {
        herd_tb_scalar s[2] = {{"train/loss", 1.0 / (double)step}, {"lr", 0.1 * (double)step}};
        assert_herd_ok(herd_tb_write_scalars(w, step * 10, s, 2));
    }
    float x[100];
    for (int i = 0; i < 100; i++)
        x[i] = (float)i - 20.0f;
    x[7] = NAN; /* left out of the histogram */
    assert_herd_ok(herd_tb_write_histogram(w, 30, "weights/fc.weight", x, 100));
    assert_herd_ok(herd_tb_writer_close(w));
    return path;
}

static void test_scalars_and_histogram_read_back(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char *sub = NULL;
    assert_true(asprintf(&sub, "%s/run/a", dir) > 0); /* created with its parents */
    char *path = write_sample(sub);
    assert_non_null(strstr(path, "/events.out.tfevents."));

    herd_tb_reader *r;
    assert_herd_ok(herd_tb_reader_open(path, &r));
    Tensorboard__Event *ev;
    bool truncated;
    assert_herd_ok(herd_tb_reader_next(r, &ev, &truncated));
    assert_non_null(ev);
    assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_FILE_VERSION);
    assert_string_equal(ev->file_version, "brain.Event:2");
    assert_true(ev->wall_time > 1.6e9); /* seconds since 1970, not a monotonic clock */
    herd_tb_event_free(ev);
    for (long step = 1; step <= 3; step++) {
        assert_herd_ok(herd_tb_reader_next(r, &ev, &truncated));
        assert_non_null(ev);
        assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
        assert_int_equal(ev->step, step * 10);
        assert_int_equal(ev->summary->n_value, 2);
        Tensorboard__Summary__Value **v = ev->summary->value;
        assert_string_equal(v[0]->tag, "train/loss");
        assert_int_equal(v[0]->value_case, TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE);
        assert_float_equal(v[0]->simple_value, 1.0 / (double)step, 1e-7);
        assert_string_equal(v[1]->tag, "lr");
        assert_float_equal(v[1]->simple_value, 0.1 * (double)step, 1e-7);
        herd_tb_event_free(ev);
    }
    assert_herd_ok(herd_tb_reader_next(r, &ev, &truncated));
    assert_non_null(ev);
    assert_int_equal(ev->step, 30);
    Tensorboard__Summary__Value *v = ev->summary->value[0];
    assert_string_equal(v->tag, "weights/fc.weight");
    assert_int_equal(v->value_case, TENSORBOARD__SUMMARY__VALUE__VALUE_HISTO);
    Tensorboard__HistogramProto *h = v->histo;
    assert_float_equal(h->num, 99, 0);
    assert_float_equal(h->min, -20, 0);
    assert_float_equal(h->max, 79, 0);
    assert_float_equal(h->sum, (99 * 100 / 2 - 20 * 100) - (7 - 20), 1e-9);
    assert_int_equal(h->n_bucket, h->n_bucket_limit);
    double counted = 0;
    for (size_t i = 0; i < h->n_bucket; i++) {
        counted += h->bucket[i];
        if (i > 0)
            assert_true(h->bucket_limit[i] > h->bucket_limit[i - 1]);
    }
    assert_float_equal(counted, 99, 0);
    assert_float_equal(h->bucket_limit[h->n_bucket - 1], 79, 0);
    herd_tb_event_free(ev);
    assert_herd_ok(herd_tb_reader_next(r, &ev, &truncated));
    assert_null(ev);
    assert_false(truncated);
    herd_tb_reader_close(r);
    free(path);
    free(sub);
    tu_rmtree(dir);
    free(dir);
}

/* Cut at every byte: the reader returns exactly the records that end before the
 * cut, says the file was truncated unless the cut falls between records, and
 * never reports an error. */
static void test_truncated_files_read_to_last_whole_record(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char *path = write_sample(dir);
    size_t len;
    uint8_t *bytes = (uint8_t *)tu_read_file(path, &len);
    size_t ends[16];
    int n_records = 0;
    for (size_t off = 0; off < len; n_records++) {
        uint64_t n = 0;
        for (int i = 0; i < 8; i++)
            n |= (uint64_t)bytes[off + i] << (8 * i);
        off += HERD_TFRECORD_OVERHEAD + n;
        ends[n_records] = off;
    }
    assert_int_equal(n_records, 5);
    assert_int_equal(ends[n_records - 1], len);
    for (size_t cut = 0; cut <= len; cut++) {
        char *cut_path = tu_write_file(dir, "cut", bytes, cut);
        int whole = 0;
        while (whole < n_records && ends[whole] <= cut)
            whole++;
        bool at_boundary = cut == 0 || (whole > 0 && ends[whole - 1] == cut);
        bool truncated;
        assert_int_equal(count_events(cut_path, &truncated), whole);
        assert_int_equal(truncated, !at_boundary);
        free(cut_path);
    }
    free(bytes);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

static void test_corrupt_crc_is_reported(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char *path = write_sample(dir);
    size_t len;
    uint8_t *bytes = (uint8_t *)tu_read_file(path, &len);
    uint64_t first = 0;
    for (int i = 0; i < 8; i++)
        first |= (uint64_t)bytes[i] << (8 * i);
    size_t second = HERD_TFRECORD_OVERHEAD + first;
    /* One flipped bit in the second record's data, then in its length. */
    size_t flips[2] = {second + 12 + 3, second + 1};
    for (int k = 0; k < 2; k++) {
        bytes[flips[k]] ^= 0x10;
        char *bad = tu_write_file(dir, "bad", bytes, len);
        bytes[flips[k]] ^= 0x10;
        herd_tb_reader *r;
        assert_herd_ok(herd_tb_reader_open(bad, &r));
        Tensorboard__Event *ev;
        bool truncated;
        assert_herd_ok(herd_tb_reader_next(r, &ev, &truncated));
        assert_non_null(ev);
        herd_tb_event_free(ev);
        assert_int_equal(herd_tb_reader_next(r, &ev, &truncated), HERD_ERR_FORMAT);
        assert_null(ev);
        assert_non_null(strstr(herd_last_error(), "CRC"));
        herd_tb_reader_close(r);
        free(bad);
    }
    free(bytes);
    free(path);
    tu_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------- a training run's files */

/* What the progress callback saw: the mean loss of each 4 steps (all batches are
 * full, so the mean of the steps' losses is the mean per sample), each epoch's loss,
 * throughput and mean step time. */
typedef struct logged {
    long steps[64];
    double loss[64], lr[64];
    int n;
    double loss_sum; /* of the steps since the last logged one */
    int epochs;
    double epoch_loss[8], test_acc[8], epoch_samples_per_s[8], epoch_step_ms[8];
} logged;

static bool record(const herd_progress *p, void *user)
{
    logged *l = user;
    if (p->epoch_end) {
        l->epoch_loss[l->epochs] = p->loss;
        l->epoch_samples_per_s[l->epochs] = p->epoch_samples_per_s;
        l->epoch_step_ms[l->epochs] = 1e3 * p->phases.total;
        l->test_acc[l->epochs++] = p->evaluated ? p->test_acc : -1;
        return true;
    }
    l->loss_sum += p->step_loss;
    if (p->global_step % 4 == 0 && l->n < 64) {
        l->steps[l->n] = p->global_step;
        l->loss[l->n] = l->loss_sum / 4;
        l->lr[l->n++] = p->lr;
        l->loss_sum = 0;
    }
    return true;
}

static double scalar(const Tensorboard__Event *ev, const char *tag, bool *found)
{
    for (size_t i = 0; i < ev->summary->n_value; i++)
        if (strcmp(ev->summary->value[i]->tag, tag) == 0) {
            *found = true;
            return ev->summary->value[i]->simple_value;
        }
    *found = false;
    return 0;
}

static void check_event_file(const char *logdir, const logged *l, const herd_model *m)
{
    char *path = find_event_file(logdir);
    herd_tb_reader *r;
    assert_herd_ok(herd_tb_reader_open(path, &r));
    Tensorboard__Event *ev;
    bool truncated, found;
    assert_herd_ok(herd_tb_reader_next(r, &ev, &truncated));
    assert_string_equal(ev->file_version, "brain.Event:2");
    herd_tb_event_free(ev);
    int step_events = 0, epoch_events = 0, histograms = 0;
    const char *phases[] = {"step_time/total_ms", "step_time/data_wait_ms", "step_time/forward_ms",
                            "step_time/backward_ms", "step_time/comm_wait_ms",
                            "step_time/optimizer_ms", "throughput/samples_per_s"};
    for (;;) {
        assert_herd_ok(herd_tb_reader_next(r, &ev, &truncated));
        if (!ev)
            break;
        assert_int_equal(ev->what_case, TENSORBOARD__EVENT__WHAT_SUMMARY);
        Tensorboard__Summary__Value *v0 = ev->summary->value[0];
        if (v0->value_case == TENSORBOARD__SUMMARY__VALUE__VALUE_HISTO) {
            assert_int_equal(ev->step % 8, 0); /* --histograms 8 */
            assert_true(strncmp(v0->tag, "weights/", 8) == 0 || strncmp(v0->tag, "grads/", 6) == 0);
            histograms++;
        } else if (strcmp(v0->tag, "train/loss") == 0) {
            assert_true(step_events < l->n);
            assert_int_equal(ev->step, l->steps[step_events]);
            assert_float_equal(v0->simple_value, l->loss[step_events], 1e-6 * l->loss[step_events]);
            assert_float_equal(scalar(ev, "lr", &found), (float)l->lr[step_events], 0);
            assert_true(found);
            for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
                double ms = scalar(ev, phases[i], &found);
                assert_true(found);
                assert_true(ms >= 0);
            }
            step_events++;
        } else {
            assert_string_equal(v0->tag, "epoch/train_loss");
            assert_float_equal(v0->simple_value, l->epoch_loss[epoch_events],
                               1e-6 * l->epoch_loss[epoch_events]);
            double acc = scalar(ev, "test/acc", &found);
            assert_true(found);
            assert_float_equal(acc, (float)l->test_acc[epoch_events], 0);
            epoch_events++;
        }
        herd_tb_event_free(ev);
    }
    assert_false(truncated);
    assert_int_equal(step_events, l->n);
    assert_int_equal(epoch_events, l->epochs);
    /* Per histogram step: weights and grads of every parameter tensor. */
    int params = 0;
    for (int i = 0; i < m->n_views; i++)
        params += !m->views[i].is_buffer;
    assert_true(histograms > 0);
    assert_int_equal(histograms % (2 * params), 0);
    herd_tb_reader_close(r);
    free(path);
}

static void check_metrics_file(const char *path, const logged *l)
{
    char *text = tu_read_file(path, NULL);
    const char *keys[] = {"kind", "epoch", "step", "time_s", "train_loss", "train_acc", "lr",
                          "samples_per_s", "step_ms", "data_wait_ms", "forward_ms", "backward_ms",
                          "comm_wait_ms", "optimizer_ms"};
    int steps = 0, epochs = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            if (!cJSON_HasObjectItem(o, keys[i]))
                fail_msg("metrics line lacks \"%s\": %s", keys[i], line);
        assert_false(cJSON_HasObjectItem(o, "loss_scale")); /* no loss scaler in this run */
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(o, "kind"));
        double step = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "step"));
        if (strcmp(kind, "step") == 0) {
            assert_true(steps < l->n);
            assert_float_equal(step, (double)l->steps[steps], 0);
            assert_float_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "train_loss")),
                               l->loss[steps], 1e-12 * l->loss[steps]);
            assert_false(cJSON_HasObjectItem(o, "test_acc"));
            steps++;
        } else {
            assert_string_equal(kind, "epoch");
            assert_float_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "epoch")), epochs + 1, 0);
            assert_float_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "train_loss")),
                               l->epoch_loss[epochs], 1e-12 * l->epoch_loss[epochs]);
            assert_float_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "test_acc")),
                               l->test_acc[epochs], 1e-12);
            assert_true(cJSON_HasObjectItem(o, "test_loss"));
            /* the epoch's own throughput (not the run's so far) and mean step */
            double sps = cJSON_GetNumberValue(cJSON_GetObjectItem(o, "samples_per_s"));
            assert_true(l->epoch_samples_per_s[epochs] > 0);
            assert_float_equal(sps, l->epoch_samples_per_s[epochs],
                               1e-12 * l->epoch_samples_per_s[epochs]);
            assert_float_equal(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "step_ms")),
                               l->epoch_step_ms[epochs], 1e-12 * l->epoch_step_ms[epochs]);
            epochs++;
        }
        cJSON_Delete(o);
    }
    assert_int_equal(steps, l->n);
    assert_int_equal(epochs, l->epochs);
    free(text);
}

static void test_training_writes_logdir_and_metrics(void **state)
{
    (void)state;
    char *dir = tu_tempdir();
    char *logdir = NULL, *metrics = NULL;
    assert_true(asprintf(&logdir, "%s/tb", dir) > 0);
    assert_true(asprintf(&metrics, "%s/metrics.jsonl", dir) > 0);
    herd_dataset *train, *test;
    assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,256", HERD_SPLIT_TRAIN, &train));
    assert_herd_ok(herd_dataset_open("synthetic:1,12,12,4,64", HERD_SPLIT_TEST, &test));
    herd_model *m;
    assert_herd_ok(herd_model_create("mlp", train, &m));
    herd_train_config cfg;
    herd_train_config_default(&cfg);
    cfg.epochs = 2;
    cfg.batch_size = 32; /* 8 steps per epoch */
    cfg.threads = 1;
    cfg.logdir = logdir;
    cfg.metrics_path = metrics;
    cfg.histograms = 8;
    cfg.log_every = 4;
    logged l = {0};
    herd_train_result res;
    assert_herd_ok(herd_train(m, train, test, &cfg, record, &l, &res));
    assert_int_equal(l.n, 4);
    assert_int_equal(l.epochs, 2);
    check_event_file(logdir, &l, m);
    check_metrics_file(metrics, &l);

    /* --histograms without --logdir is refused, not ignored. */
    cfg.logdir = NULL;
    assert_int_equal(herd_train(m, train, test, &cfg, NULL, NULL, &res), HERD_ERR_INVALID_ARG);
    assert_non_null(strstr(herd_last_error(), "--logdir"));

    herd_model_free(m);
    herd_dataset_free(train);
    herd_dataset_free(test);
    free(logdir);
    free(metrics);
    tu_rmtree(dir);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_scalars_and_histogram_read_back),
        cmocka_unit_test(test_truncated_files_read_to_last_whole_record),
        cmocka_unit_test(test_corrupt_crc_is_reported),
        cmocka_unit_test(test_training_writes_logdir_and_metrics),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
