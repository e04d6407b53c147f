/* Learning-rate schedules: linear warmup, then constant, step or cosine. */
#include <math.h>

#include "optim/optim.h"

/* Warmup length in steps; fractional epochs round to the nearest step. */
static long warmup_steps(const herd_train_config *cfg, long steps_per_epoch)
{
    if (cfg->warmup_epochs <= 0.0f)
        return 0;
    return lround((double)cfg->warmup_epochs * (double)steps_per_epoch);
}

float herd_lr_at(const herd_train_config *cfg, long global_step, long steps_per_epoch)
{
    if (!cfg)
        return 0.0f;
    const double lr = cfg->lr;
    if (steps_per_epoch < 1)
        steps_per_epoch = 1;
    if (global_step < 0)
        global_step = 0;

    long warm = warmup_steps(cfg, steps_per_epoch);
    /* Step 0 already trains with lr/warm, so the ramp ends exactly at lr. */
    if (global_step < warm)
        return (float)(lr * (double)(global_step + 1) / (double)warm);

    switch (cfg->schedule) {
    case HERD_SCHED_STEP: {
        /* Milestones are epochs, as in torch MultiStepLR stepped once per epoch:
         * epoch index e (0-based) runs with gamma^(number of milestones <= e). */
        long epoch = global_step / steps_per_epoch;
        double f = 1.0;
        for (int i = 0; i < cfg->n_milestones && i < HERD_MAX_MILESTONES; i++)
            if (epoch >= cfg->milestones[i])
                f *= cfg->gamma;
        return (float)(lr * f);
    }
    case HERD_SCHED_COSINE: {
        /* Annealed over the steps after warmup, reaching 0 at the last step + 1. */
        long total = (long)cfg->epochs * steps_per_epoch - warm;
        if (total <= 0)
            return (float)lr;
        long t = global_step - warm;
        if (t > total)
            t = total;
        return (float)(0.5 * lr * (1.0 + cos(M_PI * (double)t / (double)total)));
    }
    case HERD_SCHED_CONSTANT:
    default:
        return (float)lr;
    }
}
