/* ZeRO's checkpoints: the file holds whole optimizer-state tensors, as without ZeRO,
 * so any grid resumes from it. Rank 0 writes it while the ranks' slices stream in, a
 * piece at a time (no rank ever holds the whole state), and a resume hands each rank
 * its slice of what rank 0 read. */
#include "train/zero.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "dist/signature.h"

/* Pieces of at most this many floats: one MPI message each, and rank 0's buffer. */
#define PIECE_FLOATS ((size_t)1 << 24)
#define STATE_TAG 1000

static size_t slice_len(const herd_zero *z, int r) { return z->bounds[r + 1] - z->bounds[r]; }

/* One piece between this rank and `peer`: n floats, at most PIECE_FLOATS. */
static herd_status transfer_piece(herd_comm *c, bool send, float *buf, size_t n, int peer,
                                  int tensor, const char *what)
{
    herd_p2p req;
    HERD_TRY(c->ops->p2p_start(c, &req, send, buf, n * sizeof(float), peer, STATE_TAG + tensor));
    return c->ops->p2p_wait(c, &req, what);
}

/* n floats between this rank and `peer`, piece by piece (the other side does the same). */
static herd_status transfer_slice(herd_comm *c, bool send, float *buf, size_t n, int peer,
                                  int tensor, const char *what)
{
    for (size_t done = 0; done < n; done += PIECE_FLOATS)
        HERD_TRY(transfer_piece(c, send, buf + done, n - done < PIECE_FLOATS ? n - done : PIECE_FLOATS,
                                peer, tensor, what));
    return HERD_OK;
}

typedef struct slice_stream {
    const herd_zero *z;
    herd_comm *c;
    const float *mine; /* rank 0's own slice of this tensor */
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
    size_t n = slice_len(s->z, s->rank) - s->done;
    n = n < PIECE_FLOATS ? n : PIECE_FLOATS;
    if (s->rank == s->z->rank) {
        *piece = s->mine + s->done;
    } else {
        char what[96];
        snprintf(what, sizeof what, "rank 0: receiving the slice of optimizer state '%s' for the "
                 "checkpoint", s->name);
        HERD_TRY(transfer_piece(s->c, false, s->buf, n, s->rank, s->tensor, what));
        *piece = s->buf;
    }
    s->done += n;
    s->left -= n;
    *bytes = n * sizeof(float);
    return HERD_OK;
}

/* Rank 0: writes the checkpoint, then takes whatever a failed write left unsent, so
 * that no sender waits for ever. */
static herd_status save_on_root(const herd_zero *z, herd_comm *c, const char *dir,
                                const herd_model *m, herd_optimizer *o, const herd_train_state *st,
                                float *buf)
{
    int n = herd_optimizer_state_count(o);
    slice_stream streams[HERD_CKPT_MAX_STATE];
    herd_state_slices slices = {.numel = z->bounds[z->ranks], .optimizer_steps = herd_optimizer_steps(o)};
    for (int i = 0; i < n && i < HERD_CKPT_MAX_STATE; i++) {
        streams[i] = (slice_stream){.z = z, .c = c, .tensor = i, .buf = buf,
                                    .left = z->bounds[z->ranks]};
        streams[i].mine = herd_optimizer_state(o, i, &streams[i].name, NULL);
        slices.next[i] = next_piece;
        slices.user[i] = &streams[i];
    }
    herd_status written = herd_checkpoint_save(dir, m, o, st, &slices);
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

herd_status herd_zero_save(const herd_zero *z, herd_comm *c, const char *dir, const herd_model *m,
                           herd_optimizer *o, const herd_train_state *st)
{
    /* Rank 0's piece buffer, agreed first: a rank 0 without it would leave the others
     * sending to no one. */
    float *buf = NULL;
    herd_status ready = HERD_OK;
    if (c->rank == 0) {
        size_t biggest = 0;
        for (int r = 1; r < z->ranks; r++)
            biggest = slice_len(z, r) > biggest ? slice_len(z, r) : biggest;
        biggest = biggest < PIECE_FLOATS ? biggest : PIECE_FLOATS;
        buf = herd_xcalloc(biggest ? biggest : 1, sizeof *buf);
        ready = buf ? HERD_OK : HERD_ERR_NOMEM;
    }
    ready = herd_agree(c, ready, "preparing to write the optimizer state's slices");
    if (ready != HERD_OK) {
        free(buf);
        return ready;
    }
    if (c->rank == 0) {
        herd_status written = save_on_root(z, c, dir, m, o, st, buf);
        free(buf);
        return written;
    }
    for (int i = 0; i < herd_optimizer_state_count(o); i++) {
        const char *name;
        const float *mine = herd_optimizer_state(o, i, &name, NULL);
        char what[96];
        snprintf(what, sizeof what, "sending the slice of optimizer state '%s' to rank 0 for the "
                 "checkpoint", name);
        HERD_TRY(transfer_slice(c, true, (float *)mine, slice_len(z, z->rank), 0, i, what));
    }
    return HERD_OK;
}

/* Between `whole` on rank 0 of c and every rank's slice in `mine`: to_root gathers,
 * otherwise scatters. */
static herd_status move_slices(const herd_zero *z, herd_comm *c, herd_optimizer *whole,
                               herd_optimizer *mine, bool to_root)
{
    for (int i = 0; i < herd_optimizer_state_count(mine); i++) {
        const char *name;
        float *slice = herd_optimizer_state(mine, i, &name, NULL);
        float *all = c->rank == 0 ? herd_optimizer_state(whole, i, NULL, NULL) : NULL;
        if (c->rank == 0 && to_root)
            memcpy(all + z->lo, slice, slice_len(z, 0) * sizeof(float));
        else if (c->rank == 0)
            memcpy(slice, all + z->lo, slice_len(z, 0) * sizeof(float));
        for (int r = 1; r < z->ranks; r++) {
            if (c->rank != 0 && c->rank != r)
                continue;
            bool sending = (c->rank == 0) != to_root;
            char what[112];
            snprintf(what, sizeof what, "%s a slice of optimizer state '%s' (checkpoint)",
                     sending ? "sending" : "receiving", name);
            HERD_TRY(transfer_slice(c, sending, c->rank == 0 ? all + z->bounds[r] : slice,
                                    slice_len(z, r), c->rank == 0 ? r : 0, i, what));
        }
    }
    return HERD_OK;
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
