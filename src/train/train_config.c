/* The training configuration: its defaults (the values the CLI documents), the checks
 * of its values, against each other, the job and the data, and the configuration a
 * run trains with (the elastic fit, lr scaling and warmup resolved). */
#include <math.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "train/run.h"

/* --keep-checkpoints' default: the newest, and one older to fall back on. */
#define KEEP_CHECKPOINTS_DEFAULT 2

void herd_train_config_default(herd_train_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->epochs = 10;
    cfg->batch_size = 128;
    cfg->lr = 0.05f;
    cfg->optimizer = HERD_OPT_SGD;
    cfg->momentum = 0.9f;
    cfg->nesterov = false;
    cfg->weight_decay = 5e-4f;
    cfg->decoupled_decay = false;
    cfg->decay_bn_bias = false;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->eps = 1e-8f;
    cfg->schedule = HERD_SCHED_CONSTANT;
    cfg->n_milestones = 0;
    cfg->gamma = 0.1f;
    cfg->warmup_epochs = -1.0f; /* auto: 0, or 5 with lr_scaling */
    cfg->augment = false;
    cfg->label_smoothing = 0.0f;
    cfg->threads = 0;
    cfg->seed = 42;
    cfg->checkpoint_dir = NULL;
    cfg->keep_checkpoints = KEEP_CHECKPOINTS_DEFAULT;
    cfg->resume = false;
    cfg->eval_every = 1;
    cfg->max_steps = 0;
    cfg->dist = NULL;
    cfg->lr_scaling = false;
    cfg->sync_bn = false;
    cfg->compress = HERD_COMPRESS_NONE;
    cfg->grad_accum = 1;
    cfg->bucket_mb = 25.0;
    cfg->check_replicas = false;
    cfg->pipeline_stages = 1;
    cfg->micro_batches = 1;
    cfg->tensor_parallel = 1;
    cfg->pp_schedule = HERD_PP_SCHEDULE_1F1B;
    cfg->stage_split = NULL;
    cfg->logdir = NULL;
    cfg->histograms = 0;
    cfg->metrics_path = NULL;
    cfg->log_every = 0; /* 50 */
    cfg->dynamic_loss_scale = false;
    cfg->loss_scale_init = 65536.0f; /* 2^16, as torch.cuda.amp.GradScaler */
    cfg->loss_scale_window = 2000;
    cfg->clip_grad_norm = 0.0f;
    cfg->skip_nonfinite = false; /* stop */
}

herd_status herd_train_config_check(const herd_train_config *c)
{
    if (c->epochs <= 0 || c->batch_size <= 0)
        return HERD_OPTION_ERR("epochs (%d) and batch size (%d) must be positive",
                               c->epochs, c->batch_size);
    if (!(c->lr > 0) || !isfinite(c->lr))
        return HERD_OPTION_ERR("learning rate must be positive, got %g", c->lr);
    if (c->momentum < 0 || c->momentum >= 1)
        return HERD_OPTION_ERR("momentum must be in [0, 1), got %g", c->momentum);
    if (c->nesterov && c->momentum == 0)
        return HERD_OPTION_ERR("Nesterov momentum needs --momentum > 0");
    if (c->weight_decay < 0)
        return HERD_OPTION_ERR("weight decay must be >= 0, got %g", c->weight_decay);
    if (c->label_smoothing < 0 || c->label_smoothing >= 1)
        return HERD_OPTION_ERR("label smoothing must be in [0, 1), got %g",
                               c->label_smoothing);
    if (c->warmup_epochs > c->epochs)
        return HERD_OPTION_ERR("warmup epochs must be at most the epochs, got %g",
                               c->warmup_epochs);
    if (c->resume && !c->checkpoint_dir)
        return HERD_OPTION_ERR("--resume needs --checkpoint-dir");
    if ((c->checkpoint_every_steps || c->checkpoint_every_s > 0) && !c->checkpoint_dir)
        return HERD_OPTION_ERR("--checkpoint-every-%s needs --checkpoint-dir",
                               c->checkpoint_every_steps ? "steps" : "seconds");
    if (c->keep_checkpoints < 0)
        return HERD_OPTION_ERR("--keep-checkpoints must be 0 (every one) or more, got %d",
                               c->keep_checkpoints);
    /* The default cannot be told from the same count given: only other counts are refused. */
    if (c->keep_checkpoints != KEEP_CHECKPOINTS_DEFAULT && !c->checkpoint_dir)
        return HERD_OPTION_ERR("--keep-checkpoints %d needs --checkpoint-dir (it says how many "
                               "of its checkpoints stay)", c->keep_checkpoints);
    if (c->schedule == HERD_SCHED_STEP && c->n_milestones == 0)
        return HERD_OPTION_ERR("--schedule step needs --milestones");
    if (c->schedule != HERD_SCHED_STEP && c->n_milestones > 0)
        return HERD_OPTION_ERR("--milestones are the epochs where --schedule step lowers the "
                               "learning rate; the schedule is %s: add --schedule step or drop "
                               "--milestones", c->schedule == HERD_SCHED_COSINE ? "cosine" : "constant");
    if (c->nesterov && c->optimizer == HERD_OPT_ADAMW)
        return HERD_OPTION_ERR("--nesterov is SGD's momentum, and the optimizer is AdamW (whose "
                               "momentum is --beta1): drop --nesterov or use --optimizer sgd");
    if (c->metrics_path && c->timeline_path && herd_same_file(c->metrics_path, c->timeline_path))
        return HERD_OPTION_ERR("--metrics and --timeline name one file ('%s'): the trace would "
                               "overwrite the metrics; give them two files", c->metrics_path);
    if (c->histograms && !c->logdir)
        return HERD_OPTION_ERR("--histograms writes TensorBoard files: add --logdir DIR");
    if (c->stage_split && c->pipeline_stages <= 1)
        return HERD_OPTION_ERR("--stage-split needs --pipeline-stages > 1");
    if (c->checkpoint_dir && !*c->checkpoint_dir)
        return HERD_OPTION_ERR("--checkpoint-dir is empty: name a directory");
    if (c->n_milestones < 0 || c->n_milestones > HERD_MAX_MILESTONES)
        return HERD_OPTION_ERR("at most %d milestones", HERD_MAX_MILESTONES);
    if (c->grad_accum < 1)
        return HERD_OPTION_ERR("gradient accumulation needs at least 1 micro-batch");
    if ((unsigned)c->compress > HERD_COMPRESS_BF16)
        return HERD_OPTION_ERR("compress is 0 (none), 1 (fp16) or 2 (bf16)");
    if (!(c->bucket_mb > 0))
        return HERD_OPTION_ERR("bucket size must be positive, got %g MiB", c->bucket_mb);
    if (c->pipeline_stages > HERD_PP_MAX_STAGES || c->micro_batches < 0 ||
        c->pipeline_stages < 0)
        return HERD_OPTION_ERR("pipeline stages must be in 1..%d and micro-batches at "
                               "least 1, got %d and %d", HERD_PP_MAX_STAGES, c->pipeline_stages,
                               c->micro_batches);
    if (c->tensor_parallel < 0 || c->tensor_parallel > 64)
        return HERD_OPTION_ERR("--tensor-parallel must be in 1..64, got %d", c->tensor_parallel);
    if (c->cuda_graphs) {
        /* Each runs collectives or host decisions inside the forward or backward, which a
         * replayed graph cannot hold. */
        const char *with = c->deterministic        ? "--deterministic"
                           : c->sync_bn            ? "--sync-bn"
                           : c->pipeline_stages > 1 ? "--pipeline-stages"
                           : c->tensor_parallel > 1 ? "--tensor-parallel"
                                                   : NULL;
        if (with)
            return HERD_INPUT_ERR(HERD_ERR_UNSUPPORTED, "--cuda-graphs does not work with %s: "
                                  "its forward or backward exchanges with other ranks or decides "
                                  "on the host mid-step; drop one of them (docs/gpu.md)", with);
    }
    /* A replayed graph would replay the host's choices of what to re-run (untested). */
    if (c->recompute && c->cuda_graphs)
        return HERD_INPUT_ERR(HERD_ERR_UNSUPPORTED, "--recompute does not work with --cuda-graphs "
                              "yet; drop one of them (docs/memory.md)");
    if (c->loss_chunk < 0)
        return HERD_OPTION_ERR("--loss-chunk must be 0 (off) or a number of samples, got %d",
                               c->loss_chunk);
    /* A replayed graph runs the loss its own way (not yet chunked). */
    if (c->loss_chunk && c->cuda_graphs)
        return HERD_INPUT_ERR(HERD_ERR_UNSUPPORTED, "--loss-chunk does not work with --cuda-graphs "
                              "yet; drop one of them (docs/memory.md)");
    if ((unsigned)c->pp_schedule > HERD_PP_SCHEDULE_GPIPE)
        return HERD_OPTION_ERR("pipeline schedule is 0 (1f1b) or 1 (gpipe), got %d",
                               (int)c->pp_schedule);
    if (c->micro_batches > 1 && c->batch_size % c->micro_batches != 0)
        return HERD_OPTION_ERR("--batch-size %d does not divide into --micro-batches %d; pick a batch size "
                               "that is a multiple of the micro-batches", c->batch_size, c->micro_batches);
    if (c->zero_stage < 0 || c->zero_stage > 2)
        return HERD_OPTION_ERR("ZeRO stage %d is not offered: 0 (off), 1 "
                               "(optimizer state sharded) or 2 (and gradients)", c->zero_stage);
    if (!(c->clip_grad_norm >= 0.0f) || !isfinite(c->clip_grad_norm))
        return HERD_OPTION_ERR("gradient clipping needs a maximum norm > 0 (or 0 for none), got %g",
                               (double)c->clip_grad_norm);
    if (c->slice_size < 0 || (c->slice_size > 0 && !c->deterministic))
        return HERD_OPTION_ERR("--slice-size %d: %s", c->slice_size,
                               c->slice_size < 0 ? "a slice holds at least one sample (0: the default, 8)"
                                                 : "slices are --deterministic's unit of work; add "
                                                   "--deterministic or drop --slice-size");
    if (c->deterministic && c->batch_size % herd_slice_size(c) != 0)
        return HERD_OPTION_ERR("--deterministic computes slices of %d samples "
                               "(--slice-size), and --batch-size %d is not a whole number of them; pick "
                               "a --batch-size that is a multiple of %d, or another --slice-size (the "
                               "same on every run you compare)", herd_slice_size(c), c->batch_size,
                               herd_slice_size(c));
    /* A chunk of whole slices keeps each slice's loss and gradient as they are. */
    if (c->deterministic && c->loss_chunk % herd_slice_size(c) != 0)
        return HERD_OPTION_ERR("--deterministic computes slices of %d samples (--slice-size), "
                               "and --loss-chunk %d is not a whole number of them; pick a "
                               "multiple of %d", herd_slice_size(c), c->loss_chunk,
                               herd_slice_size(c));
    /* Pipeline stages: a micro-batch is one slice, passed between stages whole. */
    int micro = c->micro_batches > 0 ? c->batch_size / c->micro_batches : c->batch_size;
    if (c->deterministic && c->pipeline_stages > 1 && micro != herd_slice_size(c))
        return HERD_OPTION_ERR("--deterministic with --pipeline-stages: a "
                               "micro-batch is one slice of %d samples (--slice-size), but --batch-size "
                               "%d in %d --micro-batches makes micro-batches of %d; use --micro-batches "
                               "%d (or --slice-size %d)", herd_slice_size(c), c->batch_size,
                               c->micro_batches, micro, c->batch_size / herd_slice_size(c), micro);
    if (c->dynamic_loss_scale && (!(c->loss_scale_init >= 1.0f) || !isfinite(c->loss_scale_init) ||
                                  c->loss_scale_window < 1))
        return HERD_OPTION_ERR("loss scaling needs an initial scale >= 1 (got %g) and a window >= 1 step "
                               "(got %d)",
                               (double)c->loss_scale_init, c->loss_scale_window);
    return HERD_OK;
}

/* A fixed default, not one derived from the batch size: runs that split one global
 * batch differently must cut it into the same slices to give the same bytes. */
int herd_slice_size(const herd_train_config *c) { return c->slice_size > 0 ? c->slice_size : 8; }

/* The ranks that hold one replica of the model: its pipeline stages, or its tensor
 * parts. */
static int ranks_per_replica(const herd_train_config *c)
{
    return (c->pipeline_stages > 1 ? c->pipeline_stages : 1) *
           (c->tensor_parallel > 1 ? c->tensor_parallel : 1);
}

/* The replicas of the model: ranks, or with pipeline stages the pipelines, with tensor
 * parallelism the groups of parts. */
int herd_run_replicas(const run *r)
{
    int per = ranks_per_replica(&r->cfg);
    return per > 1 && r->comm->size % per == 0 ? r->comm->size / per : r->comm->size;
}

/* --elastic-batch keep: the per-replica batch and accumulation that keep the global batch
 * of n0 replicas x c's batch x accumulation on n replicas, in whole micro-batches (of
 * --micro-batches, or of --deterministic's slices) no larger than c's; an error naming
 * what cannot be kept. */
static herd_status keep_global_batch(const herd_train_config *c, int n0, int n, int *batch,
                                     int *accum)
{
    long g0 = (long)n0 * c->batch_size * c->grad_accum;
    /* --deterministic: micro-batches of whole slices, which keep their size; with pipeline
     * stages a micro-batch is one slice, so a round of them is the unit. */
    bool rounds = c->deterministic && c->pipeline_stages > 1 && c->micro_batches > 1;
    long micro_unit = rounds                ? (long)c->micro_batches * herd_slice_size(c)
                      : c->micro_batches > 1 ? c->micro_batches
                      : c->deterministic    ? herd_slice_size(c)
                                            : 1;
    long per = n > 0 && g0 % n == 0 ? g0 / n : 0; /* samples per replica and step */
    *accum = 0, *batch = 0;
    if (per > 0 && per % c->batch_size == 0 && per / c->batch_size <= 4096) {
        *batch = c->batch_size;
        *accum = (int)(per / c->batch_size);
    }
    if (c->deterministic && per % micro_unit != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "elastic with --deterministic: the global batch %ld (%d replicas x %d x %d) "
                        "cannot be kept on %d replicas in whole %s of %d%s; restart with a number "
                        "of ranks that divides its %ld %s", g0, n0, c->batch_size, c->grad_accum, n,
                        rounds ? "rounds" : "slices", (int)micro_unit,
                        rounds ? " (--micro-batches slices)" : " (--slice-size)", g0 / micro_unit,
                        rounds ? "rounds" : "slices");
    for (long a = 1; !*accum && per > 0 && a <= 4096 && a <= per; a++)
        if (per % a == 0 && per / a <= c->batch_size && (per / a) % micro_unit == 0) {
            *accum = (int)a;
            *batch = (int)(per / a);
        }
    if (!*accum)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "elastic: the global batch %ld (%d replicas x %d x %d) cannot be kept on %d "
                        "replicas%s; restart with a number of ranks that divides it, or "
                        "--elastic-batch scale", g0, n0, c->batch_size, c->grad_accum, n,
                        per ? " in whole micro-batches" : "");
    return HERD_OK;
}

bool herd_train_elastic_keeps(const herd_train_config *cfg, int ranks0, int ranks)
{
    int per = ranks_per_replica(cfg), batch, accum;
    if (ranks0 < per || ranks < per || ranks0 % per || ranks % per)
        return false;
    return ranks == ranks0 ||
           keep_global_batch(cfg, ranks0 / per, ranks / per, &batch, &accum) == HERD_OK;
}

/* An elastic run on another number of replicas than its batch was given for:
 * keep the global batch (fewest micro-batches whose size is at most the given one)
 * or the per-rank batch with lr scaled. Every rank computes the same. */
static herd_status resolve_elastic(run *r)
{
    herd_train_config *c = &r->cfg;
    int stages = ranks_per_replica(c);
    int n0 = c->elastic_ranks, n = herd_run_replicas(r);
    if (n0 < 0 || (unsigned)c->elastic_batch > HERD_ELASTIC_SCALE)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "elastic ranks must be >= 0 (got %d) and the elastic "
                        "batch keep or scale", n0);
    if (n0 % stages != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "elastic ranks %d are not whole pipelines of %d stages",
                        n0, stages);
    n0 /= stages; /* the replicas the batch was given for: ranks count every stage */
    if (n0 == 0 || n0 == n)
        return HERD_OK;
    long g0 = (long)n0 * c->batch_size * c->grad_accum;
    bool rank0 = r->comm->rank == 0;
    if (c->elastic_batch == HERD_ELASTIC_SCALE) {
        long g = (long)n * c->batch_size * c->grad_accum;
        float lr = c->lr_scaling ? c->lr : c->lr * (float)g / (float)g0; /* lr scaling sees g itself */
        if (rank0) /* said even under --quiet, as a restart is: the run differs from its flags */
            herd_log(HERD_LOG_WARNING, "elastic: %d replicas instead of %d: per-rank batch %d kept, "
                     "global batch %ld (was %ld), lr %g%s", n, n0, c->batch_size, g, g0, (double)lr,
                     c->lr_scaling ? " (--lr-scaling follows the global batch)" : " (linear rule)");
        c->lr = lr;
        return HERD_OK;
    }
    int batch, accum;
    HERD_TRY(keep_global_batch(c, n0, n, &batch, &accum));
    if (rank0)
        herd_log(HERD_LOG_WARNING, "elastic: %d replicas instead of %d: global batch %ld kept as %d x "
                 "%d x %d (--batch-size %d --grad-accum %d)", n, n0, g0, n, batch, accum, batch, accum);
    c->batch_size = batch;
    c->grad_accum = accum;
    return HERD_OK;
}

/* Linear scaling rule with gradual warmup (Goyal et al. 2017), after the elastic fit. */
herd_status herd_run_resolve_config(run *r, const herd_train_config *cfg)
{
    r->cfg = *cfg;
    if (r->cfg.pipeline_stages < 1) /* a config from before pipelines: zeroed */
        r->cfg.pipeline_stages = 1;
    if (r->cfg.micro_batches < 1)
        r->cfg.micro_batches = 1;
    if (r->cfg.tensor_parallel < 1)
        r->cfg.tensor_parallel = 1;
    HERD_TRY(resolve_elastic(r));
    long global_batch = (long)r->cfg.batch_size * r->cfg.grad_accum * herd_run_replicas(r);
    if (cfg->lr_scaling)
        r->cfg.lr = cfg->lr * (float)global_batch / 256.0f;
    if (cfg->warmup_epochs < 0) /* "auto" */
        r->cfg.warmup_epochs = cfg->lr_scaling ? (cfg->epochs < 5 ? (float)cfg->epochs : 5.0f) : 0.0f;
    return HERD_OK;
}

/* The pipeline's arguments against the job and the model. */
herd_status herd_run_check_pipeline(const run *r)
{
    const herd_train_config *c = &r->cfg;
    int P = c->pipeline_stages;
    if (P == 1) {
        if (c->micro_batches > 1)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "--micro-batches %d needs --pipeline-stages > 1; "
                            "without stages, use --grad-accum", c->micro_batches);
        /* Silently ignored otherwise: a schedule or split only means something to stages. */
        if (c->stage_split || c->pp_schedule != HERD_PP_SCHEDULE_1F1B)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "--%s needs --pipeline-stages > 1",
                            c->stage_split ? "stage-split" : "pp-schedule");
        if (!r->m->params && c->tensor_parallel <= 1)
            return HERD_ERR(HERD_ERR_INVALID_ARG, "model '%s' is a plan without parameters; only "
                            "training with pipeline stages or tensor parallelism builds them",
                            r->m->name);
        return herd_run_check_tensor(r);
    }
    if (P > r->m->n_layers)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--pipeline-stages %d asks for more stages than model '%s' has layers (%d)",
                        P, r->m->name, r->m->n_layers);
    int per = ranks_per_replica(c);
    if (r->comm->size % per != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "%d ranks do not divide into pipelines of %d stages%s; start a multiple "
                        "of %d ranks (stages x %sdata-parallel replicas)", r->comm->size, P,
                        per > P ? " of --tensor-parallel parts" : "", per,
                        per > P ? "parts x " : "");
    return herd_run_check_tensor(r);
}

/* --tensor-parallel against the job and the backend. */
herd_status herd_run_check_tensor(const run *r)
{
    int T = r->cfg.tensor_parallel;
    if (T <= 1)
        return HERD_OK;
    if (r->comm->size % T != 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "%d ranks do not divide into groups of --tensor-parallel %d; start a "
                        "multiple of %d ranks (tensor parts x data-parallel replicas)",
                        r->comm->size, T, T);
    int per = ranks_per_replica(&r->cfg);
    if (r->cfg.zero_stage && r->comm->size < 2 * per)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--zero %d shards each part's optimizer state across the data-parallel "
                        "replicas, and %d ranks in groups of --tensor-parallel %d%s give one; "
                        "start at least %d ranks or drop --zero", r->cfg.zero_stage, r->comm->size,
                        T, per > T ? " in every pipeline stage" : "", 2 * per);
    const herd_backend *be = r->m->be;
    if (!be->xent_part_stats || !be->xent_part_grad)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "--tensor-parallel: the %s backend has no "
                        "vocabulary-parallel cross-entropy; use --device cpu", be->name);
    return HERD_OK;
}

int herd_train_min_ranks(int pipeline_stages, int zero_stage)
{
    int stages = pipeline_stages > 1 ? pipeline_stages : 1;
    return zero_stage ? 2 * stages : stages;
}

/* --zero against the job. */
herd_status herd_run_check_zero(const run *r)
{
    const herd_train_config *c = &r->cfg;
    if (r->comm->size >= herd_train_min_ranks(c->pipeline_stages, c->zero_stage))
        return HERD_OK;
    if (c->pipeline_stages > 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "--zero %d shards each stage's optimizer state across the stage's "
                        "data-parallel replicas, and %d ranks in %d stages give one; start at least "
                        "%d ranks or drop --zero", c->zero_stage, r->comm->size, c->pipeline_stages,
                        2 * c->pipeline_stages);
    return HERD_ERR(HERD_ERR_INVALID_ARG,
                    "--zero %d shards the optimizer state across data-parallel ranks, and this "
                    "job has one; start several (herd run -np N -- train ...) or drop --zero",
                    c->zero_stage);
}

/* The data against the model: its inputs, and labels below its classes. */
herd_status herd_train_check_shapes(const herd_model *m, herd_dataset *train, herd_dataset *test)
{
    int c, h, w, classes;
    herd_dataset_shape(train, &c, &h, &w, &classes);
    if (c != m->in_c || h != m->in_h || w != m->in_w || classes > m->classes)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "model '%s' expects %dx%dx%d inputs and %d classes, the data has "
                        "%dx%dx%d and %d",
                        m->name, m->in_c, m->in_h, m->in_w, m->classes, c, h, w, classes);
    if (test) {
        int tc, th, tw, tclasses;
        herd_dataset_shape(test, &tc, &th, &tw, &tclasses);
        if (tc != c || th != h || tw != w || tclasses > m->classes)
            return HERD_ERR(HERD_ERR_INVALID_ARG,
                            "the test data (%dx%dx%d, %d classes) does not fit model '%s' "
                            "(%dx%dx%d, %d classes); its labels must stay below the training "
                            "data's classes",
                            tc, th, tw, tclasses, m->name, m->in_c, m->in_h, m->in_w, m->classes);
    }
    return HERD_OK;
}
