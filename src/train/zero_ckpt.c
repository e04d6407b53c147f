/* ZeRO's checkpoints: the file holds whole optimizer-state tensors, as without ZeRO,
 * so any grid resumes from it. Rank 0 writes it while the ranks' slices stream in, a
 * piece at a time (no rank ever holds the whole state), and a resume hands each rank
 * its slice of what rank 0 read. Every piece travels through host memory: copied out
 * of the optimizer's memory (a device's too), sent, and copied in, so the
 * communicator's point-to-point transfers take host buffers. */
#include "train/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/signature.h"

/* Pieces of at most this many floats: one MPI message each, and each rank's buffer. */
#define PIECE_FLOATS ((size_t)1 << 24)
#define STATE_TAG 1000

static size_t slice_len(const herd_zero *z, int r) { return z->bounds[r + 1] - z->bounds[r]; }

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

/* One piece between this rank and `peer`: n floats, at most PIECE_FLOATS. */
static herd_status transfer_piece(herd_comm *c, bool send, float *buf, size_t n, int peer,
                                  int tensor, const char *what)
{
    herd_p2p req;
    HERD_TRY(c->ops->p2p_start(c, &req, send, buf, n * sizeof(float), peer, STATE_TAG + tensor));
    return c->ops->p2p_wait(c, &req, what);
}

/* A host buffer for pieces of the slices of `ranks` (every rank when NULL: rank 0's),
 * agreed over c: a rank without one would leave its peers waiting for ever. */
static herd_status piece_buffer(const herd_zero *z, herd_comm *c, bool all_slices, float **buf)
{
    size_t biggest = 0;
    for (int r = 0; r < z->ranks; r++)
        if (all_slices || r == z->rank)
            biggest = slice_len(z, r) > biggest ? slice_len(z, r) : biggest;
    biggest = min_size(biggest, PIECE_FLOATS);
    *buf = herd_xcalloc(biggest ? biggest : 1, sizeof **buf);
    herd_status st = herd_agree(c, *buf ? HERD_OK : HERD_ERR_NOMEM,
                                "preparing to move the optimizer state's slices");
    if (st != HERD_OK) {
        free(*buf);
        *buf = NULL;
    }
    return st;
}

typedef struct slice_stream {
    const herd_zero *z;
    herd_comm *c;
    herd_optimizer *o; /* rank 0's own slice of the state */
    const char *name;
    int tensor;
    int rank;    /* the rank whose slice comes next */
    size_t done; /* floats of it already given */
    size_t left; /* floats of the whole tensor not yet given */
    float *buf;
} slice_stream;

/* The next piece of one state tensor, in rank order (herd_part_source). */
static herd_status next_piece(void *user, const void **piece, size_t *bytes)
{
    slice_stream *s = user;
    if (s->left == 0)
        return HERD_ERR(HERD_ERR_INTERNAL, "optimizer state '%s': asked for more than its %zu "
                        "floats", s->name, s->z->bounds[s->z->ranks]);
    while (s->done == slice_len(s->z, s->rank)) { /* left > 0: a later rank has some */
        s->rank++;
        s->done = 0;
    }
    size_t n = min_size(slice_len(s->z, s->rank) - s->done, PIECE_FLOATS);
    if (s->rank == s->z->rank) {
        HERD_TRY(herd_optimizer_state_download(s->o, s->tensor, s->done, n, s->buf));
    } else {
        char what[96];
        snprintf(what, sizeof what, "rank 0: receiving the slice of optimizer state '%s' for the "
                 "checkpoint", s->name);
        HERD_TRY(transfer_piece(s->c, false, s->buf, n, s->rank, s->tensor, what));
    }
    *piece = s->buf;
    s->done += n;
    s->left -= n;
    *bytes = n * sizeof(float);
    return HERD_OK;
}

/* Rank 0: writes the checkpoint, then takes whatever a failed write left unsent, so
 * that no sender waits for ever. */
static herd_status save_on_root(const herd_zero *z, herd_comm *c, const char *dir, int keep,
                                const herd_model *m, herd_optimizer *o, const herd_train_state *st,
                                float *buf)
{
    int n = herd_optimizer_state_count(o);
    slice_stream streams[HERD_CKPT_MAX_STATE];
    herd_state_slices slices = {.numel = z->bounds[z->ranks], .optimizer_steps = herd_optimizer_steps(o)};
    for (int i = 0; i < n && i < HERD_CKPT_MAX_STATE; i++) {
        streams[i] = (slice_stream){.z = z, .c = c, .o = o, .tensor = i, .buf = buf,
                                    .left = z->bounds[z->ranks]};
        herd_optimizer_state(o, i, &streams[i].name, NULL);
        slices.next[i] = next_piece;
        slices.user[i] = &streams[i];
    }
    herd_status written = herd_checkpoint_save(dir, m, o, st, &slices, keep);
    char why[1024];
    snprintf(why, sizeof why, "%s", herd_last_error());
    herd_status drained = HERD_OK;
    for (int i = 0; i < n && i < HERD_CKPT_MAX_STATE && drained == HERD_OK; i++) {
        const void *piece;
        size_t bytes;
        while (drained == HERD_OK && streams[i].left > 0)
            drained = next_piece(&streams[i], &piece, &bytes);
    }
    if (written != HERD_OK)
        return HERD_ERR(written, "%s", why);
    return drained;
}

/* Another rank: its slice of each tensor to rank 0, a piece at a time. */
static herd_status send_slices(const herd_zero *z, herd_comm *c, herd_optimizer *o, float *buf)
{
    for (int i = 0; i < herd_optimizer_state_count(o); i++) {
        const char *name;
        herd_optimizer_state(o, i, &name, NULL);
        char what[96];
        snprintf(what, sizeof what, "sending the slice of optimizer state '%s' to rank 0 for the "
                 "checkpoint", name);
        for (size_t done = 0, len = slice_len(z, z->rank); done < len; done += PIECE_FLOATS) {
            size_t n = min_size(len - done, PIECE_FLOATS);
            HERD_TRY(herd_optimizer_state_download(o, i, done, n, buf));
            HERD_TRY(transfer_piece(c, true, buf, n, 0, i, what));
        }
    }
    return HERD_OK;
}

herd_status herd_zero_save(const herd_zero *z, herd_comm *c, const char *dir, int keep,
                           const herd_model *m, herd_optimizer *o, const herd_train_state *st)
{
    float *buf;
    HERD_TRY(piece_buffer(z, c, c->rank == 0, &buf));
    herd_status done = c->rank == 0 ? save_on_root(z, c, dir, keep, m, o, st, buf)
                                    : send_slices(z, c, o, buf);
    free(buf);
    return done;
}

/* Copies n floats of state tensor i between two optimizers through the host buffer:
 * from `from` at from_at to `to` at to_at. */
static herd_status copy_state(herd_optimizer *from, size_t from_at, herd_optimizer *to, size_t to_at,
                              int i, size_t n, float *buf)
{
    for (size_t done = 0; done < n; done += PIECE_FLOATS) {
        size_t k = min_size(n - done, PIECE_FLOATS);
        HERD_TRY(herd_optimizer_state_download(from, i, from_at + done, k, buf));
        HERD_TRY(herd_optimizer_state_upload(to, i, to_at + done, k, buf));
    }
    return HERD_OK;
}

/* Rank r's slice of tensor i between rank 0's `whole` and r's `mine`, a piece at a
 * time; only rank 0 and rank r take part. */
static herd_status move_slice(const herd_zero *z, herd_comm *c, herd_optimizer *whole,
                              herd_optimizer *mine, bool to_root, int i, int r, float *buf)
{
    const char *name;
    herd_optimizer_state(mine, i, &name, NULL);
    bool sending = (c->rank == 0) != to_root;
    char what[112];
    snprintf(what, sizeof what, "%s a slice of optimizer state '%s' (checkpoint)",
             sending ? "sending" : "receiving", name);
    for (size_t done = 0, len = slice_len(z, r); done < len; done += PIECE_FLOATS) {
        size_t n = min_size(len - done, PIECE_FLOATS);
        herd_optimizer *o = c->rank == 0 ? whole : mine;
        size_t at = (c->rank == 0 ? z->bounds[r] : 0) + done;
        if (sending)
            HERD_TRY(herd_optimizer_state_download(o, i, at, n, buf));
        HERD_TRY(transfer_piece(c, sending, buf, n, c->rank == 0 ? r : 0, i, what));
        if (!sending)
            HERD_TRY(herd_optimizer_state_upload(o, i, at, n, buf));
    }
    return HERD_OK;
}

/* Between `whole` on rank 0 of c and every rank's slice in `mine`: to_root gathers,
 * otherwise scatters. */
static herd_status move_slices(const herd_zero *z, herd_comm *c, herd_optimizer *whole,
                               herd_optimizer *mine, bool to_root)
{
    float *buf;
    HERD_TRY(piece_buffer(z, c, c->rank == 0, &buf));
    herd_status st = HERD_OK;
    for (int i = 0; st == HERD_OK && i < herd_optimizer_state_count(mine); i++) {
        if (c->rank == 0)
            st = to_root ? copy_state(mine, 0, whole, z->lo, i, slice_len(z, 0), buf)
                         : copy_state(whole, z->lo, mine, 0, i, slice_len(z, 0), buf);
        for (int r = 1; st == HERD_OK && r < z->ranks; r++)
            if (c->rank == 0 || c->rank == r)
                st = move_slice(z, c, whole, mine, to_root, i, r, buf);
    }
    free(buf);
    return st;
}

herd_status herd_zero_scatter_state(const herd_zero *z, herd_comm *c, herd_optimizer *whole,
                                    herd_optimizer *mine)
{
    return move_slices(z, c, whole, mine, false);
}

herd_status herd_zero_gather_state(const herd_zero *z, herd_comm *c, herd_optimizer *mine,
                                   herd_optimizer *whole)
{
    return move_slices(z, c, whole, mine, true);
}
