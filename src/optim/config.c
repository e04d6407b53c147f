/* Default training configuration (the values the CLI documents), and the names of
 * its enumerations. */
#include <string.h>

#include "core/error.h"
#include "herd/herd.h"

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

const char *herd_compress_name(herd_compress c)
{
    switch (c) {
    case HERD_COMPRESS_NONE: return "none";
    case HERD_COMPRESS_FP16: return "fp16";
    case HERD_COMPRESS_BF16: return "bf16";
    }
    return "unknown";
}

herd_status herd_compress_parse(const char *name, herd_compress *out)
{
    static const herd_compress all[] = {HERD_COMPRESS_NONE, HERD_COMPRESS_FP16, HERD_COMPRESS_BF16};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++)
        if (strcmp(name, herd_compress_name(all[i])) == 0) {
            *out = all[i];
            return HERD_OK;
        }
    return HERD_ERR(HERD_ERR_INVALID_ARG, "unknown compression '%s' (use fp16, bf16 or none)",
                    name ? name : "(null)");
}
