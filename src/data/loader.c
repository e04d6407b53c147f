/* The batch loader: background threads turn uint8 samples into normalised float batches.
 *
 * Order. Each epoch uses one permutation of 0..n-1 seeded by (seed, epoch), identical on
 * every shard. Global step g takes the permutation's next shard_count * batch_size
 * positions and rank k gets the k-th contiguous piece of them, so K ranks of batch B
 * see exactly the batches one process of batch K*B would see, and shards are disjoint.
 * An epoch may start at any permutation position (a resume, possibly with another
 * shard count or batch): the rules below then apply to the positions left.
 *
 * Every rank gets the same number of batches, and batches of the same size at each step,
 * so data-parallel ranks never disagree on the step count or need weighted averaging:
 *   drop_last:  floor(n / (K*B)) batches of B; the leftover is dropped.
 *   otherwise:  ceil(n / (K*B)) batches; the last global step's r samples are split evenly,
 *               ceil(r/K) per rank, and the few positions past n wrap around to the start
 *               of the permutation (as PyTorch's DistributedSampler pads). With one shard
 *               nothing wraps: every sample appears exactly once.
 *
 * Token data: a sample is a sequence (dataset.h), its labels the T next tokens; no
 * augmentation applies. Sharding and order are the same, by sequence.
 *
 * Augmentation (random crop from the image padded by 4 pixels, horizontal flip p=0.5)
 * draws from a stream seeded by (seed, epoch, dataset index), so it depends neither on the
 * number of workers nor on the shard layout, and a resumed epoch reproduces it. Padding
 * happens before normalisation: padded pixels have raw value 0, i.e. (0 - mean) / std,
 * as with torchvision's RandomCrop followed by Normalize.
 *
 * Threads. Batch j of the epoch is prepared into slot j % (prefetch + 1): the caller holds
 * one slot (the batch it last received) while workers fill up to `prefetch` batches ahead.
 * Starting an epoch bumps a generation counter that in-flight workers poll, waits for
 * them to stop, then resets the ring. */
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"

#define AUG_PAD 4
#define SHUFFLE_STREAM 0x5348554646ULL /* distinct stream ids keep shuffle and augment independent */
#define AUGMENT_STREAM 0x4155474dULL
#define MAX_WORKERS 64
#define MAX_PREFETCH 256

typedef struct loader_slot {
    float *x;
    int32_t *labels;
    int n;
    long batch; /* which batch of the epoch it holds */
    bool ready;
} loader_slot;

struct herd_loader {
    const herd_dataset *ds;
    herd_loader_config cfg;
    size_t sample_floats;
    size_t sample_labels; /* labels per sample: 1, or T for token data */
    long batches;         /* per whole epoch, for this shard */
    long first_pos;       /* permutation position the current epoch started at */
    long epoch_batches;   /* batches of the current epoch from first_pos */
    long last_global_pos; /* first permutation position of the current epoch's last global step */
    int last_batch_n;     /* per-rank size of that last batch */
    float lut[3][256];    /* normalised value of every raw pixel, per channel */

    uint32_t *perm;
    loader_slot *slots;
    int nslots;
    pthread_t *threads;
    int nthreads;

    bool sync_ready; /* mutex and condition variables initialised */
    pthread_mutex_t mu;
    pthread_cond_t work_cv;  /* workers wait for something to prepare */
    pthread_cond_t ready_cv; /* the caller waits for a batch, or for workers to go idle */
    bool stop;
    bool epoch_active;
    int epoch;
    long next_prepare; /* next batch a worker will take */
    long next_consume; /* next batch the caller will receive */
    long held;         /* batch the caller holds (-1: none) */
    int busy;          /* workers preparing a batch right now */
    atomic_uint generation;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Normalises one sample, cropping and flipping when asked. */
static void prepare_sample(const herd_loader *l, size_t index, float *out)
{
    const herd_dataset *ds = l->ds;
    const int c = ds->c, h = ds->h, w = ds->w;
    const uint8_t *img = ds->images + index * l->sample_floats;
    int dy = 0, dx = 0;
    bool flip = false;
    if (l->cfg.augment) {
        herd_rng r;
        herd_rng_seed(&r, l->cfg.seed ^ AUGMENT_STREAM, (uint64_t)l->epoch, index);
        flip = herd_rng_below(&r, 2) == 1;
        dy = (int)herd_rng_below(&r, 2 * AUG_PAD + 1) - AUG_PAD;
        dx = (int)herd_rng_below(&r, 2 * AUG_PAD + 1) - AUG_PAD;
    }
    if (!flip && dy == 0 && dx == 0) {
        for (int ch = 0; ch < c; ch++) {
            const float *lut = l->lut[ch];
            const uint8_t *src = img + (size_t)ch * h * w;
            float *dst = out + (size_t)ch * h * w;
            for (int i = 0; i < h * w; i++)
                dst[i] = lut[src[i]];
        }
        return;
    }
    for (int ch = 0; ch < c; ch++) {
        const float *lut = l->lut[ch];
        const uint8_t *src = img + (size_t)ch * h * w;
        float *dst = out + (size_t)ch * h * w;
        for (int y = 0; y < h; y++) {
            int sy = y + dy;
            for (int x = 0; x < w; x++) {
                int sx = (flip ? w - 1 - x : x) + dx;
                bool inside = sy >= 0 && sy < h && sx >= 0 && sx < w;
                dst[y * w + x] = lut[inside ? src[sy * w + sx] : 0];
            }
        }
    }
}

/* Sequence `index` of token data: its tokens as floats, and the next tokens as labels. */
static void prepare_sequence(const herd_loader *l, size_t index, float *out, int32_t *labels)
{
    const size_t t = l->sample_labels;
    const uint16_t *tok = l->ds->tokens + index * t;
    for (size_t i = 0; i < t; i++) {
        out[i] = (float)tok[i];
        labels[i] = tok[i + 1];
    }
}

/* Fills slot with batch j; returns false if the epoch was restarted meanwhile. */
static bool prepare_batch(herd_loader *l, long j, loader_slot *slot, unsigned gen)
{
    const long B = l->cfg.batch_size, K = l->cfg.shard_count, k = l->cfg.shard_rank;
    const size_t n = l->ds->n;
    long first, count;
    if (j == l->epoch_batches - 1 && !l->cfg.drop_last) {
        count = l->last_batch_n;
        first = l->last_global_pos + k * count;
    } else {
        count = B;
        first = l->first_pos + j * K * B + k * B;
    }
    for (long i = 0; i < count; i++) {
        if (atomic_load_explicit(&l->generation, memory_order_relaxed) != gen)
            return false;
        size_t index = l->perm[(size_t)(first + i) % n];
        float *x = slot->x + (size_t)i * l->sample_floats;
        if (l->ds->tokens) {
            prepare_sequence(l, index, x, slot->labels + (size_t)i * l->sample_labels);
            continue;
        }
        slot->labels[i] = l->ds->labels[index];
        prepare_sample(l, index, x);
    }
    slot->n = (int)count;
    return true;
}

static void *worker_main(void *arg)
{
    herd_loader *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        if (l->epoch_active && l->next_prepare < l->epoch_batches &&
            l->next_prepare < l->next_consume + l->cfg.prefetch) {
            long j = l->next_prepare++;
            loader_slot *slot = &l->slots[j % l->nslots];
            unsigned gen = atomic_load(&l->generation);
            l->busy++;
            pthread_mutex_unlock(&l->mu);
            bool done = prepare_batch(l, j, slot, gen);
            pthread_mutex_lock(&l->mu);
            l->busy--;
            if (done && gen == atomic_load(&l->generation)) {
                slot->batch = j;
                slot->ready = true;
            }
            pthread_cond_broadcast(&l->ready_cv);
            continue;
        }
        pthread_cond_wait(&l->work_cv, &l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* Stops in-flight work and empties the ring; call with mu held. */
static void cancel_locked(herd_loader *l)
{
    atomic_fetch_add(&l->generation, 1);
    l->epoch_active = false;
    while (l->busy > 0)
        pthread_cond_wait(&l->ready_cv, &l->mu);
    for (int i = 0; i < l->nslots; i++)
        l->slots[i].ready = false;
    l->held = -1;
}

static herd_status check_config(const herd_dataset *ds, const herd_loader_config *c)
{
    if (!ds || (!ds->images && !ds->tokens) || ds->n == 0 || ds->c < 1 || ds->c > 3)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: the dataset is empty (token data: is the "
                        "sequence length set?) or has an unsupported channel count (1..3)");
    if (ds->n > UINT32_MAX)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: %zu samples is more than supported", ds->n);
    if (c->batch_size < 1)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: batch size %d must be at least 1",
                        c->batch_size);
    if (c->prefetch < 1 || c->prefetch > MAX_PREFETCH)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: prefetch %d must be in 1..%d", c->prefetch,
                        MAX_PREFETCH);
    if (c->workers < 1 || c->workers > MAX_WORKERS)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: workers %d must be in 1..%d", c->workers,
                        MAX_WORKERS);
    if (c->augment && ds->tokens)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--augment (random crops and flips of images) does not "
                        "apply to token data (%s); leave it out", ds->spec);
    if (c->shard_count < 1 || c->shard_rank < 0 || c->shard_rank >= c->shard_count)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: shard %d of %d is out of range",
                        c->shard_rank, c->shard_count);
    return HERD_OK;
}

herd_status herd_loader_create(const herd_dataset *ds, const herd_loader_config *cfg,
                               herd_loader **out)
{
    if (!cfg || !out)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_loader_create: cfg and out must be set");
    *out = NULL;
    HERD_TRY(check_config(ds, cfg));
    const long B = cfg->batch_size, K = cfg->shard_count;
    const long step = K * B;
    const long n = (long)ds->n;
    long batches = cfg->drop_last ? n / step : (n + step - 1) / step;
    if (batches == 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: %ld samples make no full batch of %ld on "
                        "each of %ld shards; lower the batch size or turn off drop_last", n, B, K);

    herd_loader *l = herd_xcalloc(1, sizeof *l);
    if (!l)
        return HERD_ERR_NOMEM;
    l->ds = ds;
    l->cfg = *cfg;
    l->sample_floats = (size_t)ds->c * ds->h * ds->w;
    l->sample_labels = ds->tokens ? (size_t)ds->h : 1;
    l->batches = batches;
    l->held = -1;
    atomic_init(&l->generation, 0);
    for (int ch = 0; ch < ds->c; ch++)
        for (int v = 0; v < 256; v++)
            l->lut[ch][v] = ((float)v / 255.0f - ds->mean[ch]) / ds->std[ch];

    l->nslots = cfg->prefetch + 1;
    l->perm = herd_xcalloc(ds->n, sizeof *l->perm);
    l->slots = herd_xcalloc((size_t)l->nslots, sizeof *l->slots);
    l->threads = herd_xcalloc((size_t)cfg->workers, sizeof *l->threads);
    bool ok = l->perm && l->slots && l->threads;
    for (int i = 0; ok && i < l->nslots; i++) {
        l->slots[i].x = herd_aligned_alloc((size_t)B * l->sample_floats * sizeof(float));
        l->slots[i].labels = herd_xcalloc((size_t)B * l->sample_labels, sizeof(int32_t));
        ok = l->slots[i].x && l->slots[i].labels;
    }
    if (!ok) {
        herd_loader_free(l);
        return HERD_ERR_NOMEM;
    }
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->work_cv, NULL);
    pthread_cond_init(&l->ready_cv, NULL);
    l->sync_ready = true;
    for (int i = 0; i < cfg->workers; i++) {
        if (pthread_create(&l->threads[i], NULL, worker_main, l) != 0) {
            herd_loader_free(l);
            return HERD_ERR(HERD_ERR_INTERNAL, "loader: cannot start worker thread %d; try fewer "
                            "workers", i);
        }
        l->nthreads++;
    }
    *out = l;
    return HERD_OK;
}

/* The batches of an epoch that starts at permutation position first. */
static void plan_epoch(herd_loader *l, long first)
{
    const long B = l->cfg.batch_size, K = l->cfg.shard_count, step = K * B;
    const long left = (long)l->ds->n - first;
    l->first_pos = first;
    l->epoch_batches = l->cfg.drop_last ? left / step : (left + step - 1) / step;
    l->last_global_pos = first + (l->epoch_batches > 0 ? l->epoch_batches - 1 : 0) * step;
    l->last_batch_n = l->cfg.drop_last ? (int)B : (int)(((long)l->ds->n - l->last_global_pos + K - 1) / K);
}

herd_status herd_loader_start_epoch(herd_loader *l, int epoch, long first_sample)
{
    if (!l || epoch < 0 || first_sample < 0 || first_sample > (long)l->ds->n)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "loader: cannot start epoch %d at sample %ld "
                        "(an epoch has %zu samples)", epoch, first_sample, l ? l->ds->n : 0);
    pthread_mutex_lock(&l->mu);
    cancel_locked(l);
    /* No worker is busy and none starts until epoch_active, so perm can change here. */
    if (l->cfg.shuffle) {
        herd_rng r;
        herd_rng_seed(&r, l->cfg.seed, (uint64_t)epoch, SHUFFLE_STREAM);
        herd_rng_permutation(&r, l->perm, (uint32_t)l->ds->n);
    } else {
        for (size_t i = 0; i < l->ds->n; i++)
            l->perm[i] = (uint32_t)i;
    }
    l->epoch = epoch;
    plan_epoch(l, first_sample);
    l->next_prepare = l->next_consume = 0;
    l->epoch_active = true;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    return HERD_OK;
}

long herd_loader_batches_per_epoch(const herd_loader *l) { return l ? l->batches : 0; }

/* Only the caller's thread moves next_consume, so it reads it without the lock. */
long herd_loader_batches_left(const herd_loader *l)
{
    return l && l->epoch_active ? l->epoch_batches - l->next_consume : 0;
}

long herd_loader_position(const herd_loader *l)
{
    if (!l || !l->epoch_active)
        return 0;
    long pos = l->first_pos + l->next_consume * l->cfg.shard_count * l->cfg.batch_size;
    return pos < (long)l->ds->n ? pos : (long)l->ds->n;
}

herd_status herd_loader_next(herd_loader *l, herd_batch *b, bool *has)
{
    if (!l || !b || !has)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_loader_next: loader, batch and has must be set");
    *has = false;
    memset(b, 0, sizeof *b);
    pthread_mutex_lock(&l->mu);
    if (!l->epoch_active) {
        pthread_mutex_unlock(&l->mu);
        return HERD_ERR(HERD_ERR_INVALID_ARG, "herd_loader_next: call herd_loader_start_epoch first");
    }
    if (l->held >= 0) {
        l->slots[l->held % l->nslots].ready = false;
        l->held = -1;
    }
    if (l->next_consume >= l->epoch_batches) {
        pthread_mutex_unlock(&l->mu);
        return HERD_OK;
    }
    long j = l->next_consume;
    loader_slot *slot = &l->slots[j % l->nslots];
    /* Releasing the held slot may let a worker start the batch `prefetch` ahead. */
    pthread_cond_broadcast(&l->work_cv);
    double t0 = now_s();
    while (!(slot->ready && slot->batch == j))
        pthread_cond_wait(&l->ready_cv, &l->mu);
    double waited = now_s() - t0;
    l->held = j;
    l->next_consume = j + 1;
    pthread_cond_broadcast(&l->work_cv);
    pthread_mutex_unlock(&l->mu);
    b->x = slot->x;
    b->labels = slot->labels;
    b->n = slot->n;
    b->wait_s = waited;
    *has = true;
    return HERD_OK;
}

void herd_loader_free(herd_loader *l)
{
    if (!l)
        return;
    if (l->nthreads > 0) {
        pthread_mutex_lock(&l->mu);
        cancel_locked(l);
        l->stop = true;
        pthread_cond_broadcast(&l->work_cv);
        pthread_mutex_unlock(&l->mu);
        for (int i = 0; i < l->nthreads; i++)
            pthread_join(l->threads[i], NULL);
    }
    if (l->sync_ready) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->work_cv);
        pthread_cond_destroy(&l->ready_cv);
    }
    for (int i = 0; l->slots && i < l->nslots; i++) {
        herd_aligned_free(l->slots[i].x);
        free(l->slots[i].labels);
    }
    free(l->slots);
    free(l->perm);
    free(l->threads);
    free(l);
}
