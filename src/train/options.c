/* herd_train_config_set: the training options by name, one table for every front end
 * (herd train's flags, Python's keyword arguments), each value checked as strictly as
 * the command line always has, with the same ranges and messages. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/parse.h"
#include "herd/herd.h"

typedef enum {
    KIND_INT,    /* int field, integer in [lo, hi] */
    KIND_LONG,   /* long field */
    KIND_SEED,   /* uint64_t field */
    KIND_FLOAT,  /* float field, number in [lo, hi] */
    KIND_DOUBLE, /* double field */
    KIND_FLAG,   /* bool field: no value (true), or 1/0, true/false */
    KIND_STRING, /* const char * field, kept as given (not copied) */
    KIND_CHOICE, /* enum field: the index of the value among choices ("a|b|c") */
    KIND_CHOICE_BOOL, /* bool field: choices "no|yes" spelled per option */
    KIND_SPECIAL, /* parsed by its own function */
} option_kind;

typedef struct train_option train_option;
struct train_option {
    const char *name; /* the command line's spelling, without "--" */
    option_kind kind;
    size_t offset;
    double lo, hi;
    const char *choices;
    herd_status (*parse)(herd_train_config *c, const char *flag, const char *value);
};

static herd_status parse_milestones(herd_train_config *c, const char *flag, const char *value)
{
    int n = 0, epochs[HERD_MAX_MILESTONES];
    const char *p = value;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char tok[32];
        long v;
        if (n == HERD_MAX_MILESTONES || len == 0 || len >= sizeof tok)
            break;
        memcpy(tok, p, len);
        tok[len] = '\0';
        if (!herd_parse_long(tok, 1, 1000000, &v))
            break;
        epochs[n++] = (int)v;
        if (!end) {
            memcpy(c->milestones, epochs, sizeof epochs[0] * (size_t)n);
            c->n_milestones = n;
            return HERD_OK;
        }
        p = end + 1;
    }
    return HERD_OPTION_ERR("%s takes up to %d epochs like 30,60, got '%s'", flag,
                           HERD_MAX_MILESTONES, value);
}

static herd_status parse_zero(herd_train_config *c, const char *flag, const char *value)
{
    if (strcmp(value, "1") == 0 || strcmp(value, "2") == 0) {
        c->zero_stage = value[0] - '0';
        return HERD_OK;
    }
    if (strcmp(value, "3") == 0)
        return HERD_OPTION_ERR("%s 3 (sharding the parameters as well) is not "
                               "offered; use %s 1 (optimizer state) or %s 2 (also the gradients)", flag,
                               flag, flag);
    return HERD_OPTION_ERR("%s is 1 or 2, got '%s'", flag, value);
}

/* The names herd_compress_parse and herd_pp_schedule_parse own. */
static herd_status parse_compress(herd_train_config *c, const char *flag, const char *value)
{
    if (herd_compress_parse(value, &c->compress) == HERD_OK)
        return HERD_OK;
    return HERD_OPTION_ERR("%s is %s, %s or %s, got '%s'", flag,
                           herd_compress_name(HERD_COMPRESS_FP16), herd_compress_name(HERD_COMPRESS_BF16),
                           herd_compress_name(HERD_COMPRESS_NONE), value);
}

static herd_status parse_pp_schedule(herd_train_config *c, const char *flag, const char *value)
{
    if (herd_pp_schedule_parse(value, &c->pp_schedule) == HERD_OK)
        return HERD_OK;
    return HERD_OPTION_ERR("%s is %s or %s, got '%s'", flag,
                           herd_pp_schedule_name(HERD_PP_SCHEDULE_1F1B),
                           herd_pp_schedule_name(HERD_PP_SCHEDULE_GPIPE), value);
}

#define F(field) offsetof(herd_train_config, field)
static const train_option options[] = {
    {"epochs", KIND_INT, F(epochs), 1, 100000, NULL, NULL},
    {"batch-size", KIND_INT, F(batch_size), 1, 1 << 20, NULL, NULL},
    {"lr", KIND_FLOAT, F(lr), 1e-12, 1e3, NULL, NULL},
    {"optimizer", KIND_CHOICE, F(optimizer), 0, 0, "sgd|adamw", NULL},
    {"momentum", KIND_FLOAT, F(momentum), 0, 0.9999, NULL, NULL},
    {"nesterov", KIND_FLAG, F(nesterov), 0, 0, NULL, NULL},
    {"weight-decay", KIND_FLOAT, F(weight_decay), 0, 1, NULL, NULL},
    {"decoupled-decay", KIND_FLAG, F(decoupled_decay), 0, 0, NULL, NULL},
    {"decay-bn-bias", KIND_FLAG, F(decay_bn_bias), 0, 0, NULL, NULL},
    {"schedule", KIND_CHOICE, F(schedule), 0, 0, "constant|step|cosine", NULL},
    {"milestones", KIND_SPECIAL, 0, 0, 0, NULL, parse_milestones},
    {"gamma", KIND_FLOAT, F(gamma), 0, 1, NULL, NULL},
    {"warmup-epochs", KIND_FLOAT, F(warmup_epochs), 0, 100000, NULL, NULL},
    {"augment", KIND_FLAG, F(augment), 0, 0, NULL, NULL},
    {"label-smoothing", KIND_FLOAT, F(label_smoothing), 0, 0.999, NULL, NULL},
    {"threads", KIND_INT, F(threads), 0, 4096, NULL, NULL},
    {"seed", KIND_SEED, F(seed), 0, 0x7fffffffL, NULL, NULL},
    {"checkpoint-dir", KIND_STRING, F(checkpoint_dir), 0, 0, NULL, NULL},
    {"resume", KIND_FLAG, F(resume), 0, 0, NULL, NULL},
    {"checkpoint-every-steps", KIND_LONG, F(checkpoint_every_steps), 1, 1099511627776.0, NULL, NULL},
    {"checkpoint-every-seconds", KIND_DOUBLE, F(checkpoint_every_s), 0.001, 1e9, NULL, NULL},
    {"keep-checkpoints", KIND_INT, F(keep_checkpoints), 0, 1 << 30, NULL, NULL},
    {"elastic-batch", KIND_CHOICE, F(elastic_batch), 0, 0, "keep|scale", NULL},
    {"elastic-ranks", KIND_INT, F(elastic_ranks), 1, 1 << 20, NULL, NULL},
    {"eval-every", KIND_INT, F(eval_every), 0, 100000, NULL, NULL},
    {"max-steps", KIND_LONG, F(max_steps), 1, 1099511627776.0, NULL, NULL},
    {"log-every", KIND_INT, F(log_every), 1, 1 << 30, NULL, NULL},
    {"logdir", KIND_STRING, F(logdir), 0, 0, NULL, NULL},
    {"histograms", KIND_INT, F(histograms), 1, 1 << 30, NULL, NULL},
    {"metrics", KIND_STRING, F(metrics_path), 0, 0, NULL, NULL},
    {"timeline", KIND_STRING, F(timeline_path), 0, 0, NULL, NULL},
    /* One rule for now: a choice of one keeps the flag's value a word, not a switch. */
    {"lr-scaling", KIND_CHOICE_BOOL, F(lr_scaling), 0, 0, "|linear", NULL},
    {"sync-bn", KIND_FLAG, F(sync_bn), 0, 0, NULL, NULL},
    {"compress", KIND_SPECIAL, 0, 0, 0, NULL, parse_compress},
    {"grad-accum", KIND_INT, F(grad_accum), 1, 4096, NULL, NULL},
    {"bucket-mb", KIND_DOUBLE, F(bucket_mb), 0.001, 4096, NULL, NULL},
    {"check-replicas", KIND_FLAG, F(check_replicas), 0, 0, NULL, NULL},
    {"cuda-graphs", KIND_FLAG, F(cuda_graphs), 0, 0, NULL, NULL},
    {"recompute", KIND_FLAG, F(recompute), 0, 0, NULL, NULL},
    {"loss-chunk", KIND_INT, F(loss_chunk), 0, 1 << 20, NULL, NULL},
    {"deterministic", KIND_FLAG, F(deterministic), 0, 0, NULL, NULL},
    {"slice-size", KIND_INT, F(slice_size), 1, 1 << 20, NULL, NULL},
    {"pipeline-stages", KIND_INT, F(pipeline_stages), 1, 64, NULL, NULL},
    {"micro-batches", KIND_INT, F(micro_batches), 1, 1 << 20, NULL, NULL},
    {"tensor-parallel", KIND_INT, F(tensor_parallel), 1, 64, NULL, NULL},
    {"pp-schedule", KIND_SPECIAL, 0, 0, 0, NULL, parse_pp_schedule},
    {"stage-split", KIND_STRING, F(stage_split), 0, 0, NULL, NULL},
    {"loss-scale", KIND_CHOICE_BOOL, F(dynamic_loss_scale), 0, 0, "none|dynamic", NULL},
    {"loss-scale-init", KIND_FLOAT, F(loss_scale_init), 1, 1e38, NULL, NULL},
    {"loss-scale-window", KIND_INT, F(loss_scale_window), 1, 1 << 30, NULL, NULL},
    {"clip-grad-norm", KIND_FLOAT, F(clip_grad_norm), 0, 1e38, NULL, NULL},
    {"on-nonfinite", KIND_CHOICE_BOOL, F(skip_nonfinite), 0, 0, "stop|skip", NULL},
    {"zero", KIND_SPECIAL, 0, 0, 0, NULL, parse_zero},
};
#undef F
#define N_OPTIONS (sizeof options / sizeof options[0])

/* "--batch-size", "batch-size" and "batch_size" name the same option. */
static const train_option *find_option(const char *name)
{
    if (strncmp(name, "--", 2) == 0)
        name += 2;
    for (size_t i = 0; i < N_OPTIONS; i++) {
        const char *a = options[i].name, *b = name;
        while (*a && (*a == *b || (*a == '-' && *b == '_')))
            a++, b++;
        if (!*a && !*b)
            return &options[i];
    }
    return NULL;
}

/* The index of value among "a|b|c" (empty entries never match), or -1. */
static int choice_index(const char *choices, const char *value)
{
    size_t len = strlen(value);
    int i = 0;
    for (const char *p = choices;; i++) {
        const char *end = strchr(p, '|');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n && n == len && strncmp(p, value, n) == 0)
            return i;
        if (!end)
            return -1;
        p = end + 1;
    }
}

/* "a, b or c" for a message (empty entries left out). */
static void choice_list(const char *choices, char *out, size_t size)
{
    char words[8][32];
    int n = 0;
    for (const char *p = choices; n < 8;) {
        const char *end = strchr(p, '|');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len && len < sizeof words[0])
            snprintf(words[n++], sizeof words[0], "%.*s", (int)len, p);
        if (!end)
            break;
        p = end + 1;
    }
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", words[i]);
    }
}

static herd_status set_flag(bool *field, const char *flag, const char *value)
{
    if (!value || strcmp(value, "1") == 0 || strcmp(value, "true") == 0)
        *field = true;
    else if (strcmp(value, "0") == 0 || strcmp(value, "false") == 0)
        *field = false;
    else
        return HERD_OPTION_ERR("%s is a switch: give no value, or true or false, "
                               "got '%s'", flag, value);
    return HERD_OK;
}

static herd_status set_number(const train_option *o, void *field, const char *flag, const char *value)
{
    long iv;
    double fv;
    if (o->kind == KIND_INT || o->kind == KIND_LONG || o->kind == KIND_SEED) {
        if (!herd_parse_long(value, (long)o->lo, (long)o->hi, &iv))
            return HERD_OPTION_ERR("%s must be an integer in [%ld, %ld], got '%s'",
                                   flag, (long)o->lo, (long)o->hi, value);
        if (o->kind == KIND_INT)
            *(int *)field = (int)iv;
        else if (o->kind == KIND_LONG)
            *(long *)field = iv;
        else
            *(uint64_t *)field = (uint64_t)iv;
        return HERD_OK;
    }
    if (!herd_parse_double(value, o->lo, o->hi, &fv))
        return HERD_OPTION_ERR("%s must be a number in [%g, %g], got '%s'", flag,
                               o->lo, o->hi, value);
    if (o->kind == KIND_FLOAT)
        *(float *)field = (float)fv;
    else
        *(double *)field = fv;
    return HERD_OK;
}

herd_status herd_train_config_set(herd_train_config *cfg, const char *name, const char *value)
{
    if (!cfg || !name)
        return HERD_OPTION_ERR("herd_train_config_set: cfg and name must be set");
    const train_option *o = find_option(name);
    if (!o)
        return HERD_OPTION_ERR("unknown training option '%s' (herd train --help "
                               "lists them)", name);
    void *field = (char *)cfg + o->offset;
    if (o->kind == KIND_FLAG)
        return set_flag(field, name, value);
    if (!value)
        return HERD_OPTION_ERR("%s needs a value", name);
    char list[160];
    int index;
    switch (o->kind) {
    case KIND_STRING:
        if (!*value) /* the option's name says which: checkpoint-dir, logdir, metrics, ... */
            return HERD_OPTION_ERR("%s needs a %s, got ''", name,
                                   strcmp(o->name, "stage-split") == 0 ? "list of layers"
                                   : strstr(o->name, "dir") ? "directory" : "file");
        *(const char **)field = value;
        return HERD_OK;
    case KIND_CHOICE:
    case KIND_CHOICE_BOOL:
        index = choice_index(o->choices, value);
        if (index < 0) {
            choice_list(o->choices, list, sizeof list);
            return HERD_OPTION_ERR("%s %s %s, got '%s'", name,
                                   strchr(list, ' ') ? "is" : "takes", list, value);
        }
        if (o->kind == KIND_CHOICE)
            *(int *)field = index;
        else
            *(bool *)field = index == 1;
        return HERD_OK;
    case KIND_SPECIAL:
        return o->parse(cfg, name, value);
    default:
        return set_number(o, field, name, value);
    }
}

const char *herd_train_option_name(size_t i, bool *takes_value)
{
    if (i >= N_OPTIONS)
        return NULL;
    if (takes_value)
        *takes_value = options[i].kind != KIND_FLAG;
    return options[i].name;
}

/* KIND_CHOICE writes the index through an int. */
_Static_assert(sizeof(herd_optimizer_kind) == sizeof(int) && sizeof(herd_schedule_kind) == sizeof(int) &&
                   sizeof(herd_elastic_batch) == sizeof(int),
               "an enum of herd_train_config is not int-sized");
