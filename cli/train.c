/* herd train: train a model and print the final test accuracy. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "tools/paths.h"

static const char train_help[] =
    "usage: herd train --model MODEL [options]\n"
    "\n"
    "Train MODEL (a zoo name from 'herd models' or a model file) and evaluate it.\n"
    "\n"
    "  --model MODEL            zoo name or path of a model file (required)\n"
    "  --data DATA              fashion-mnist (default), idx:DIR[,CLASSES], cifar10:DIR,\n"
    "                           synthetic:C,H,W,CLASSES[,N], tokens:FILE[,VOCAB] (llm.c's .bin;\n"
    "                           validation: FILE's name with _train -> _val)\n"
    "  --seq-len T              token data: tokens per sample (default: the model's context)\n"
    "  --epochs N               passes over the training set (default 10)\n"
    "  --batch-size N           samples per step (default 128)\n"
    "  --lr X                   peak learning rate (default 0.05)\n"
    "  --optimizer sgd|adamw    (default sgd)\n"
    "  --momentum X             SGD momentum (default 0.9)\n"
    "  --nesterov               Nesterov momentum\n"
    "  --weight-decay X         (default 5e-4; L2 for SGD, decoupled for AdamW)\n"
    "  --decoupled-decay        SGD: decay the weights directly (SGDW) instead of L2\n"
    "  --decay-bn-bias          also decay batch-norm and bias parameters\n"
    "  --schedule S             constant (default), step, cosine\n"
    "  --milestones a,b         epochs where the step schedule multiplies lr by --gamma\n"
    "  --gamma X                step schedule factor (default 0.1)\n"
    "  --warmup-epochs N        linear warmup from ~0 to --lr (default 0)\n"
    "  --augment                random crop (padding 4) and horizontal flip\n"
    "  --label-smoothing X      (default 0)\n"
    "  --threads N              compute threads (default: OMP_NUM_THREADS, else the\n"
    "                           cores shared among the ranks on each host)\n"
    "  --device cpu|cuda|sim    where to train (default: cuda when a GPU is visible, else cpu);\n"
    "                           with several ranks each rank uses the GPU of its local rank;\n"
    "                           sim: a simulated device for tests: CPU arithmetic behind\n"
    "                           device memory the host cannot read\n"
    "  --precision P            fp32 (default); tf32 (cuda); bf16 (cuda on compute capability\n"
    "                           8.0+, or a cpu with AVX512_BF16 or AMX: 'herd --version'):\n"
    "                           16-bit convolutions and matmuls and activations, fp32\n"
    "                           weights and optimizer; fp16 (cuda, with --loss-scale dynamic)\n"
    "  --cuda-graphs            capture each batch shape's forward and backward once as CUDA\n"
    "                           graphs and replay them (two launches a step instead of one\n"
    "                           per kernel; the same arithmetic): for small models whose\n"
    "                           steps the host's launches bound\n"
    "  --gpu-memory-limit SIZE  cap herd's GPU memory, e.g. 20G (cuda and sim only)\n"
    "  --memory-limit SIZE      cap herd's memory per rank on the model's device, e.g. 300M:\n"
    "                           parameters, gradients, optimizer state, activations, workspace\n"
    "  --recompute              hold only each block's output from forward to backward and\n"
    "                           compute the rest again in backward: less memory for about\n"
    "                           one more forward a step, the same bits (docs/memory.md)\n"
    "  --loss-chunk N           the last layer and the loss N samples at a time, its backward\n"
    "                           right after each chunk: a language model holds N samples'\n"
    "                           logits, not the batch's (0 = off; docs/memory.md)\n"
    "  --loss-scale dynamic     dynamic loss scaling: skip steps with inf/NaN gradients\n"
    "  --loss-scale-init X      initial loss scale (default 65536)\n"
    "  --loss-scale-window N    clean steps before the scale doubles (default 2000)\n"
    "  --clip-grad-norm X       scale gradients down to global L2 norm X before each update\n"
    "                           (after the allreduce and the loss scaler; 0 = off, the default)\n"
    "  --on-nonfinite stop|skip  a non-finite loss or gradient without --loss-scale: stop with\n"
    "                           an error naming step and tensor, nothing saved (stop, the\n"
    "                           default), or skip the step's update (counted in skipped_steps)\n"
    "  --seed N                 initialisation, shuffling, augmentation (default 42)\n"
    "  --checkpoint-dir DIR     save weights and training state every epoch\n"
    "  --checkpoint-every-steps N  also every N steps (written in the background)\n"
    "  --checkpoint-every-seconds S  also after the step during which S s passed\n"
    "  --keep-checkpoints N     keep the N newest checkpoints, deleting older ones (2: the\n"
    "                           newest and one to fall back on); 0 = keep every one\n"
    "  --resume                 continue from the latest checkpoint in --checkpoint-dir\n"
    "  --eval-every N           evaluate every N epochs (default 1; 0 = only at the end)\n"
    "  --max-steps N            stop after N steps in total\n"
    "\n"
    "Data parallelism (start with 'herd run -np N -- train ...' or mpirun; --batch-size is per rank):\n"
    "  --lr-scaling linear      lr = --lr x global batch / 256, warmup 5 epochs unless given\n"
    "  --sync-bn                batch-norm statistics over all ranks (default: per rank)\n"
    "  --compress fp16|bf16     cast gradients for the allreduce and back\n"
    "  --grad-accum K           accumulate K micro-batches, communicate on the last (1)\n"
    "  --bucket-mb X            gradient bucket size in MiB (25; the first is 1)\n"
    "  --elastic-batch keep|scale  when the ranks differ from --elastic-ranks: keep the\n"
    "                           global batch (--grad-accum, else --batch-size, changed) or\n"
    "                           the per-rank batch with --lr scaled linearly (keep)\n"
    "  --elastic-ranks N        the ranks --batch-size, --grad-accum and --lr are meant for\n"
    "                           (herd run --max-restarts passes the first attempt's)\n"
    "  --zero 1|2               ZeRO: each rank keeps 1/N of the optimizer state (1), and of\n"
    "                           the reduced gradients (2); the traffic of one allreduce\n"
    "\n"
    "Pipeline parallelism (docs/pipeline.md):\n"
    "  --pipeline-stages P      split the model's layers into P stages on consecutive ranks;\n"
    "                           ranks = P x data-parallel replicas (1)\n"
    "  --micro-batches M        split each replica's --batch-size into M micro-batches (1)\n"
    "  --pp-schedule S          1f1b (P-s micro-batches in flight on stage s) or gpipe (1f1b)\n"
    "  --stage-split A,B        the layers where stages 1.. begin (default: balanced by each\n"
    "                           layer's measured forward+backward time)\n"
    "\n"
    "Tensor parallelism (docs/model-files.md):\n"
    "  --tensor-parallel T      split attention heads, \"parallel\" linear layers and the\n"
    "                           vocabulary over T consecutive ranks (Megatron-LM's layers);\n"
    "                           ranks = T x data-parallel replicas (1; CPU); with\n"
    "                           --pipeline-stages P inside each stage: ranks = T x P x replicas\n"
    "\n"
    "  --check-replicas         verify after every step that all replicas are identical\n"
    "  --deterministic          the same saved weights at any number of ranks, --grad-accum,\n"
    "                           --batch-size and --threads making up the same global batch\n"
    "                           (CPU, one thread per rank; see docs/determinism.md for what\n"
    "                           it does not cover yet)\n"
    "  --slice-size N           --deterministic's unit of work: samples whose gradient is\n"
    "                           computed alone; --batch-size must be a multiple of it (8)\n"
    "  --stall-warning S        report ranks missing from a collective after S s (60)\n"
    "  --comm-timeout S         abort the job after S s in one collective (300)\n"
    "  --train-samples N        use only the first N training samples\n"
    "  --test-samples N         evaluate on only the first N test samples\n"
    "  --save FILE              write the final weights (safetensors)\n"
    "  --log-every N            steps between progress lines when not on a terminal, and\n"
    "                           between points in --logdir and --metrics (50)\n"
    "  --logdir DIR             TensorBoard event files (tensorboard --logdir DIR)\n"
    "  --histograms N           also weight and gradient histograms every N steps\n"
    "  --metrics FILE           one JSON object per line per log interval and epoch\n"
    "  --timeline FILE          write a trace of every rank's steps, phases, layers and\n"
    "                           reductions (Chrome trace JSON: open in ui.perfetto.dev)\n"
    "  --quiet                  no progress, only the summary line\n"
    "  --json                   print the summary as a JSON object\n"
    "\n"
    "The last line is a summary of key=value pairs (or JSON): model, epochs, steps,\n"
    "train_loss, train_acc, test_loss, test_acc, samples_per_s, wall_s (token data: also\n"
    "tokens_per_s, samples_per_s x T; the loss and accuracy are per token).\n";

/* The flags that are not training options (herd_train_config_set has those: one table
 * for the command line and Python). */
enum {
    OPT_MODEL = 256, OPT_DATA, OPT_DEVICE, OPT_PRECISION, OPT_GPU_MEM, OPT_MEM_LIMIT,
    OPT_TRAIN_SAMPLES, OPT_TEST_SAMPLES, OPT_SEQ_LEN, OPT_SAVE, OPT_QUIET, OPT_JSON, OPT_HELP,
    OPT_STALL_WARNING, OPT_COMM_TIMEOUT, OPT_TRAINING,
};

static const struct option own_options[] = {
    {"model", required_argument, 0, OPT_MODEL},
    {"data", required_argument, 0, OPT_DATA},
    {"device", required_argument, 0, OPT_DEVICE},
    {"precision", required_argument, 0, OPT_PRECISION},
    {"gpu-memory-limit", required_argument, 0, OPT_GPU_MEM},
    {"memory-limit", required_argument, 0, OPT_MEM_LIMIT},
    {"train-samples", required_argument, 0, OPT_TRAIN_SAMPLES},
    {"test-samples", required_argument, 0, OPT_TEST_SAMPLES},
    {"seq-len", required_argument, 0, OPT_SEQ_LEN},
    {"save", required_argument, 0, OPT_SAVE},
    {"quiet", no_argument, 0, OPT_QUIET},
    {"json", no_argument, 0, OPT_JSON},
    {"help", no_argument, 0, OPT_HELP},
    {"stall-warning", required_argument, 0, OPT_STALL_WARNING},
    {"comm-timeout", required_argument, 0, OPT_COMM_TIMEOUT},
};
#define N_OWN (sizeof own_options / sizeof own_options[0])
#define MAX_TRAINING_OPTIONS 96

typedef struct train_args {
    const char *model, *data, *save, *device;
    long train_samples, test_samples, seq_len;
    bool quiet, json;
    herd_precision precision;
    uint64_t gpu_memory_limit, memory_limit;
    herd_train_config cfg;
    herd_dist_config dist;
} train_args;

/* getopt's table: this file's flags, then every training option. */
static const struct option *all_options(void)
{
    static struct option all[N_OWN + MAX_TRAINING_OPTIONS + 1];
    if (all[0].name)
        return all;
    memcpy(all, own_options, sizeof own_options);
    size_t n = N_OWN;
    bool takes_value;
    const char *name;
    for (size_t i = 0; n < N_OWN + MAX_TRAINING_OPTIONS && (name = herd_train_option_name(i, &takes_value)); i++)
        all[n++] = (struct option){name, takes_value ? required_argument : no_argument, 0, OPT_TRAINING};
    return all;
}

/* Returns -1 when parsing succeeded, else the exit code. */
static int parse_train_args(int argc, char **argv, train_args *a)
{
    herd_train_config *c = &a->cfg;
    herd_train_config_default(c);
    a->data = "fashion-mnist";
    const struct option *options = all_options();
    optind = 1;
    int opt, index;
    long iv;
    double fv;
    bool pp_schedule_given = false;
#define INT_ARG(lo, hi, dst, what)                                                  \
    do {                                                                            \
        if (!herd_parse_long(optarg, lo, hi, &iv))                                  \
            return cli_usage_error("train", "%s must be an integer in [%ld, %ld], got '%s'", \
                                   what, (long)(lo), (long)(hi), optarg);           \
        dst = iv;                                                                   \
    } while (0)
#define FLOAT_ARG(lo, hi, dst, what)                                                \
    do {                                                                            \
        if (!herd_parse_double(optarg, lo, hi, &fv))                                \
            return cli_usage_error("train", "%s must be a number in [%g, %g], got '%s'", what, \
                                   (double)(lo), (double)(hi), optarg);             \
        dst = (float)fv;                                                            \
    } while (0)
    while ((opt = cli_getopt(argc, argv, "", options, &index)) != -1) {
        switch (opt) {
        case OPT_TRAINING: {
            char flag[64];
            snprintf(flag, sizeof flag, "--%s", options[index].name);
            if (herd_train_config_set(c, flag, optarg) != HERD_OK)
                return cli_usage_error("train", "%s", herd_last_error());
            pp_schedule_given |= strcmp(options[index].name, "pp-schedule") == 0;
            break;
        }
        case OPT_MODEL: a->model = optarg; break;
        case OPT_DATA: a->data = optarg; break;
        case OPT_DEVICE: a->device = optarg; break;
        case OPT_PRECISION:
            if (herd_precision_parse(optarg, &a->precision) != HERD_OK)
                return cli_usage_error("train", "--precision is fp32, tf32, bf16 or fp16, got '%s'",
                                       optarg);
            break;
        case OPT_MEM_LIMIT:
            if (!herd_parse_size(optarg, 1 << 20, UINT64_MAX, &a->memory_limit))
                return cli_usage_error("train", "--memory-limit takes a size of at least 1M like "
                                       "300M or 4G, got '%s'", optarg);
            break;
        case OPT_GPU_MEM:
            if (!herd_parse_size(optarg, 1 << 20, UINT64_MAX, &a->gpu_memory_limit))
                return cli_usage_error("train", "--gpu-memory-limit takes a size of at least 1M "
                                       "like 512M or 20G, got '%s'", optarg);
            break;
        case OPT_TRAIN_SAMPLES: INT_ARG(1, 1L << 40, a->train_samples, "--train-samples"); break;
        case OPT_TEST_SAMPLES: INT_ARG(1, 1L << 40, a->test_samples, "--test-samples"); break;
        case OPT_SEQ_LEN: INT_ARG(1, 1L << 24, a->seq_len, "--seq-len"); break;
        case OPT_SAVE: a->save = optarg; break;
        case OPT_QUIET: a->quiet = true; break;
        case OPT_JSON: a->json = true; break;
        case OPT_HELP: fputs(train_help, stdout); return CLI_OK;
        case OPT_STALL_WARNING: FLOAT_ARG(0.1, 1e6, a->dist.stall_warning_s, "--stall-warning"); break;
        case OPT_COMM_TIMEOUT: FLOAT_ARG(0.1, 1e6, a->dist.timeout_s, "--comm-timeout"); break;
        default: return cli_usage_error("train", "unknown or incomplete option");
        }
    }
#undef INT_ARG
#undef FLOAT_ARG
    if (optind < argc)
        return cli_usage_error("train", "unexpected argument '%s'", argv[optind]);
    if (!a->model)
        return cli_usage_error("train", "--model is required (try --model lenet5; 'herd models' lists the zoo)");
    /* Like --micro-batches (refused in herd_train, where the ranks agree): given alone,
     * it would be ignored, and the library cannot tell it from the default. */
    if (c->pipeline_stages <= 1 && pp_schedule_given)
        return cli_usage_error("train", "--pp-schedule needs --pipeline-stages > 1");
    /* herd_train's own checks of the options, here before any rank starts (exit 2). */
    if (herd_train_config_check(c) != HERD_OK)
        return cli_usage_error("train", "%s", herd_last_error());
    return cli_resolve_device("train", &a->device, a->gpu_memory_limit, a->memory_limit);
}

/* Prints the progress of rank 0 only. */
static bool rank0_progress(const herd_progress *p, void *user)
{
    return p->rank != 0 || herd_console_progress_fn(p, user);
}

/* Rank 0's peak by what it held, and every rank's peak. */
static void print_memory(const herd_train_result *res, int ranks, const char *device)
{
    static const char *what[HERD_MEM_CATEGORIES] = {"parameters", "gradients", "optimizer state",
                                                    "activations", "workspace", "checkpoint"};
    const double MiB = 1048576.0;
    herd_memory_usage use;
    cli_line line;
    FILE *out = cli_line_begin(&line, stderr);
    if (herd_device_memory_usage(device, &use) == HERD_OK) {
        fprintf(out, "herd: peak memory %.1f MiB:", (double)use.peak / MiB);
        for (int c = 0; c < HERD_MEM_CATEGORIES; c++)
            fprintf(out, "%s %s %.1f", c ? "," : "", what[c], (double)use.peak_by_category[c] / MiB);
        fprintf(out, "\n");
    }
    if (ranks >= 2) {
        fprintf(out, "herd: peak memory per rank (MiB):");
        for (int r = 0; r < ranks && r < HERD_RESULT_RANKS; r++)
            fprintf(out, "%s %d: %.1f", r ? "," : "", r, (double)res->rank_memory_peak_bytes[r] / MiB);
        fprintf(out, "%s\n", ranks > HERD_RESULT_RANKS ? ", ..." : "");
    }
    cli_line_end(&line);
}

/* Under herd run --max-restarts: the line the supervisor reads (herd_dist_report_failure). */
static void tell_supervisor(const herd_dist *dist, const herd_train_result *res)
{
    herd_dist_report_failure(dist, res->steps, res->training_started, NULL);
}

int cmd_train(int argc, char **argv)
{
    train_args a = {0};
    int rc = parse_train_args(argc, argv, &a);
    if (rc >= 0)
        return rc;
    herd_dataset *train = NULL, *test = NULL;
    herd_model *m = NULL;
    herd_dist *dist = NULL;
    herd_train_result res = {0};
    herd_status st;
    rc = CLI_FAIL;
    if ((st = herd_dist_init(&a.dist, &dist)) != HERD_OK) {
        cli_fail(st, "cannot join the distributed job");
        tell_supervisor(NULL, &res);
        return CLI_FAIL;
    }
    a.cfg.dist = dist;
    bool rank0 = herd_dist_rank(dist) == 0;
    /* herd run --max-restarts says which attempt this is (restart accounting). */
    long restarts = 0;
    const char *told = getenv("HERD_RUN_RESTARTS");
    if (getenv("HERD_RUN_SUPERVISED") && a.cfg.checkpoint_dir)
        a.cfg.run_attempt = 1 + (told && herd_parse_long(told, 0, 1 << 20, &restarts) ? (int)restarts : 0);
    /* Before training, not after it: the weights are written once it ended. */
    if (a.save && rank0 && (st = herd_check_output_file(a.save, "--save")) != HERD_OK) {
        cli_fail(st, "cannot save the weights there");
        goto done;
    }
    const char *other = !a.save                                                     ? NULL
                        : a.cfg.metrics_path && herd_same_file(a.save, a.cfg.metrics_path) ? "--metrics"
                        : a.cfg.timeline_path && herd_same_file(a.save, a.cfg.timeline_path) ? "--timeline"
                                                                                     : NULL;
    if (other) {
        rc = cli_usage_error("train", "--save and %s name one file ('%s'): one would overwrite "
                             "the other; give them two files", other, a.save);
        goto done;
    }
    if ((st = cli_prepare_device(dist, a.device, a.cfg.threads, a.gpu_memory_limit)) != HERD_OK) {
        cli_fail(st, "cannot use the device");
        goto done;
    }
    if (a.memory_limit && (st = herd_device_set_memory_limit(a.device, a.memory_limit)) != HERD_OK) {
        cli_fail(st, "--memory-limit");
        goto done;
    }
    if ((st = cli_open_data(a.data, HERD_SPLIT_TRAIN, a.model, a.seq_len, &train)) != HERD_OK) {
        cli_fail(st, "cannot open the training data");
        goto done;
    }
    if ((st = cli_open_data(a.data, HERD_SPLIT_TEST, a.model, a.seq_len, &test)) != HERD_OK) {
        cli_fail(st, "cannot open the test data");
        goto done;
    }
    if (a.train_samples && (st = herd_dataset_truncate(train, (size_t)a.train_samples)) != HERD_OK) {
        cli_fail(st, "--train-samples");
        goto done;
    }
    if (a.test_samples && (st = herd_dataset_truncate(test, (size_t)a.test_samples)) != HERD_OK) {
        cli_fail(st, "--test-samples");
        goto done;
    }
    /* Pipeline stages and tensor parts build their own parameters: no rank holds the
     * whole model, unless its weights are to be saved (rank 0 collects them). */
    bool plan = (a.cfg.pipeline_stages > 1 || a.cfg.tensor_parallel > 1) && !a.save;
    st = plan ? herd_model_create_plan(a.model, train, a.device, &m)
              : herd_model_create_device(a.model, train, a.device, &m);
    if (st != HERD_OK) {
        cli_fail(st, "cannot build the model");
        goto done;
    }
    if (!plan && (st = herd_model_init_params(m, a.cfg.seed)) != HERD_OK) {
        cli_fail(st, "cannot initialise the model");
        goto done;
    }
    if ((st = herd_model_set_precision(m, a.precision)) != HERD_OK) {
        cli_fail(st, "--precision");
        goto done;
    }
    if (!a.quiet && rank0) {
        fprintf(stderr, "herd: training %s (%zu parameters) on %s: %zu train / %zu test samples\n",
                herd_model_name(m), herd_model_param_count(m), a.data, herd_dataset_size(train),
                herd_dataset_size(test));
        cli_print_device(m);
        /* An elastic fit prints its own sizes. */
        bool refit = a.cfg.elastic_ranks && a.cfg.elastic_ranks != herd_dist_size(dist);
        if (herd_dist_size(dist) > 1 && !refit)
            fprintf(stderr, "herd: %d ranks (%s), %d samples per rank per step, global batch %d\n",
                    herd_dist_size(dist), herd_dist_backend(dist), a.cfg.batch_size,
                    a.cfg.batch_size * a.cfg.grad_accum * herd_dist_size(dist) /
                        (a.cfg.pipeline_stages > 1 ? a.cfg.pipeline_stages : 1) /
                        (a.cfg.tensor_parallel > 1 ? a.cfg.tensor_parallel : 1));
    }
    if (herd_dist_size(dist) > 1 && a.cfg.pipeline_stages > 1 && !a.quiet && rank0)
        fprintf(stderr, "herd: %d pipelines of %d stages, %d micro-batches of %d (%s)\n",
                herd_dist_size(dist) / a.cfg.pipeline_stages, a.cfg.pipeline_stages,
                a.cfg.micro_batches, a.cfg.batch_size / a.cfg.micro_batches,
                herd_pp_schedule_name(a.cfg.pp_schedule));
    cli_quiet_info(a.quiet);
    herd_console_progress progress = {.stream = stderr, .log_every = a.cfg.log_every};
    st = herd_train(m, train, test, &a.cfg, a.quiet ? NULL : rank0_progress, &progress, &res);
    if (st != HERD_OK) {
        cli_fail(st, "training failed");
        goto done;
    }
    if (res.stale_tmp_removed > 0)
        fprintf(stderr, "herd: removed %d temporary file%s left in '%s' by interrupted checkpoint writes\n",
                res.stale_tmp_removed, res.stale_tmp_removed == 1 ? "" : "s", a.cfg.checkpoint_dir);
    if (a.save && rank0 && (st = herd_model_save(m, a.save)) != HERD_OK) {
        cli_fail(st, "cannot save the weights");
        goto done;
    }
    cli_summary s = {0};
    cli_summary_str(&s, "model", herd_model_name(m));
    cli_summary_num(&s, "epochs", res.epochs_done, 0);
    cli_summary_num(&s, "steps", (double)res.steps, 0);
    cli_summary_num(&s, "train_loss", res.train_loss, 4);
    cli_summary_num(&s, "train_acc", res.train_acc, 4);
    cli_summary_num(&s, "test_loss", res.test_loss, 4);
    cli_summary_num(&s, "test_acc", res.test_acc, 4);
    cli_summary_num(&s, "samples_per_s", res.samples_per_s, 1);
    int seq_len = herd_dataset_seq_len(train, NULL);
    if (seq_len > 0)
        cli_summary_num(&s, "tokens_per_s", res.samples_per_s * seq_len, 1);
    cli_summary_num(&s, "wall_s", res.wall_s, 1);
    cli_summary_num(&s, "ranks", herd_dist_size(dist), 0);
    cli_summary_str(&s, "device", herd_model_device(m));
    cli_summary_str(&s, "precision", herd_precision_name(herd_model_precision(m)));
    if (a.cfg.dynamic_loss_scale)
        cli_summary_num(&s, "loss_scale", res.loss_scale, 0);
    if (a.cfg.dynamic_loss_scale || a.cfg.skip_nonfinite)
        cli_summary_num(&s, "skipped_steps", (double)res.skipped_steps, 0);
    if (a.cfg.clip_grad_norm > 0.0f)
        cli_summary_num(&s, "clipped_steps", (double)res.clipped_steps, 0);
    if (res.restarts > 0 || getenv("HERD_RUN_SUPERVISED")) {
        cli_summary_num(&s, "restarts", res.restarts, 0);
        cli_summary_num(&s, "lost_steps", (double)res.lost_steps, 0);
        cli_summary_num(&s, "recovery_s", res.recovery_s, 1);
    }
    cli_summary_num(&s, "param_bytes", (double)res.state_bytes.params, 0);
    cli_summary_num(&s, "grad_bytes", (double)res.state_bytes.grads, 0);
    cli_summary_num(&s, "optimizer_state_bytes", (double)res.state_bytes.optimizer_state, 0);
    if (res.memory_peak_max_bytes) {
        cli_summary_num(&s, "memory_peak_mib", (double)res.memory_peak_max_bytes / 1048576.0, 1);
        if (rank0 && !a.quiet)
            print_memory(&res, herd_dist_size(dist), a.device);
    }
    if (rank0)
        cli_summary_print(&s, a.json);
    rc = CLI_OK;
done:
    if (rc != CLI_OK)
        tell_supervisor(dist, &res);
    /* One failing rank must not leave the others waiting in a collective. */
    if (rc != CLI_OK && herd_dist_size(dist) > 1)
        herd_dist_abort(dist, rc, "herd train failed on this rank; stopping the job");
    herd_model_free(m);
    herd_dataset_free(train);
    herd_dataset_free(test);
    herd_dist_free(dist);
    return rc;
}
