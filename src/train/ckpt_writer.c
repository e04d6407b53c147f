/* The background checkpoint writer (ckpt_writer.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/error.h"
#include "train/ckpt_writer.h"

/* A copy of a flat buffer, kept between checkpoints. */
typedef struct copy_buf {
    float *data;
    size_t cap, numel; /* floats allocated, and in this job */
} copy_buf;

struct herd_ckpt_writer {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool started, pending, quit;
    /* The job: a shallow copy of the model whose parameters and buffers point at the
     * copies, the optimizer state's copies (streamed to the file from here, o's own
     * state being updated meanwhile), and the position. */
    herd_model snap;
    copy_buf params, buffers, state[HERD_CKPT_MAX_STATE];
    herd_optimizer *opt;
    herd_state_slices slices;
    herd_train_state st;
    char *dir;
    int keep; /* checkpoints the directory keeps (herd_checkpoint_save) */
    /* The last write's outcome; its message, set in the writer's thread, travels here. */
    herd_status status;
    char msg[1024];
};

/* Gives a state copy to the file in one piece (herd_part_source). */
static herd_status whole_copy(void *user, const void **piece, size_t *bytes)
{
    const copy_buf *b = user;
    *piece = b->data;
    *bytes = b->numel * sizeof(float);
    return HERD_OK;
}

static void *writer_main(void *arg)
{
    herd_ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending && !w->quit)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending)
            break;
        pthread_mutex_unlock(&w->mu);
        herd_status st = herd_checkpoint_save(w->dir, &w->snap, w->opt, &w->st, &w->slices,
                                              w->keep);
        pthread_mutex_lock(&w->mu);
        w->status = st;
        snprintf(w->msg, sizeof w->msg, "%s", st == HERD_OK ? "" : herd_last_error());
        w->pending = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

herd_status herd_ckpt_writer_create(herd_ckpt_writer **out)
{
    *out = NULL;
    herd_ckpt_writer *w = herd_xcalloc(1, sizeof *w);
    if (!w)
        return HERD_ERR_NOMEM;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        herd_ckpt_writer_free(w);
        return HERD_ERR(HERD_ERR_INTERNAL, "cannot start the checkpoint writer thread: %s", strerror(rc));
    }
    w->started = true;
    *out = w;
    return HERD_OK;
}

herd_status herd_ckpt_writer_wait(herd_ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    while (w->pending)
        pthread_cond_wait(&w->cv, &w->mu);
    herd_status st = w->status;
    w->status = HERD_OK; /* reported once */
    pthread_mutex_unlock(&w->mu);
    return st == HERD_OK ? HERD_OK : HERD_ERR(st, "%s", w->msg);
}

/* Makes room for n floats in b: host memory from the CPU's allocator, so the copies
 * count against --memory-limit and in memory_peak_mib like the model's own memory. */
static herd_status reserve(copy_buf *b, size_t n)
{
    if (n > b->cap) {
        const herd_backend *cpu = herd_backend_cpu();
        cpu->free(b->data);
        b->cap = 0;
        herd_mem_category was = herd_mem_category_set(HERD_MEM_CHECKPOINT);
        b->data = cpu->alloc((n ? n : 1) * sizeof(float));
        herd_mem_category_set(was);
        if (!b->data)
            return HERD_ERR_NOMEM; /* the allocator said why */
        b->cap = n;
    }
    b->numel = n;
    return HERD_OK;
}

herd_status herd_ckpt_writer_submit(herd_ckpt_writer *w, const char *dir, int keep,
                                    const herd_model *m, herd_optimizer *o,
                                    const herd_train_state *st)
{
    /* The thread is idle from here. A failed write is reported before anything else can
     * overwrite its message, and no new write starts after it. */
    HERD_TRY(herd_ckpt_writer_wait(w));
    /* Copies out of the backend's memory (a device's through its copies, complete on
     * return): the steps after this one may change the model and o meanwhile. */
    HERD_TRY(reserve(&w->params, m->n_param_floats));
    HERD_TRY(reserve(&w->buffers, m->n_buffer_floats));
    HERD_TRY(herd_model_download(m, w->params.data, w->buffers.data));
    int n = herd_optimizer_state_count(o);
    if (n > HERD_CKPT_MAX_STATE)
        return HERD_ERR(HERD_ERR_INTERNAL, "an optimizer with %d state tensors; checkpoints hold %d", n,
                        HERD_CKPT_MAX_STATE);
    w->slices = (herd_state_slices){.numel = m->n_param_floats, .optimizer_steps = herd_optimizer_steps(o)};
    for (int i = 0; i < n; i++) {
        const char *name;
        size_t numel;
        herd_optimizer_state(o, i, &name, &numel);
        HERD_TRY(reserve(&w->state[i], numel));
        HERD_TRY(herd_optimizer_state_download(o, i, 0, numel, w->state[i].data));
        w->slices.next[i] = whole_copy;
        w->slices.user[i] = &w->state[i];
    }
    char *d = strdup(dir);
    if (!d)
        return HERD_NOMEM(strlen(dir) + 1);
    free(w->dir);
    w->dir = d;
    w->keep = keep;
    w->snap = *m;
    w->snap.params = w->params.data;
    w->snap.buffers = w->buffers.data;
    w->snap.be = herd_backend_cpu(); /* the copies are host memory, whatever the model's device */
    w->opt = o;
    w->st = *st;
    pthread_mutex_lock(&w->mu);
    w->pending = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    return HERD_OK;
}

void herd_ckpt_writer_free(herd_ckpt_writer *w)
{
    if (!w)
        return;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_broadcast(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->thread, NULL); /* a pending write finishes first */
    }
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    const herd_backend *cpu = herd_backend_cpu();
    cpu->free(w->params.data);
    cpu->free(w->buffers.data);
    for (int i = 0; i < HERD_CKPT_MAX_STATE; i++)
        cpu->free(w->state[i].data);
    free(w->dir);
    free(w);
}
