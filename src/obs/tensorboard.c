/* TensorBoard event files: Event messages encoded by protobuf-c (from
 * tensorboard.proto) in TFRecord framing (tfrecord.c). */
#include "obs/tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/fs.h"
#include "obs/tensorboard.pb-c.h"
#include "obs/tfrecord.h"

#define FLUSH_EVERY_S 5.0                /* a live TensorBoard sees progress this often */
#define FLUSH_BYTES ((size_t)1 << 20)     /* or sooner when this much is waiting */
#define HISTOGRAM_BUCKETS 30

struct herd_tb_writer {
    int fd;
    char *path;
    uint8_t *pending; /* whole framed records not yet written */
    size_t pending_len, pending_cap;
    double last_flush;
};

static double unix_time(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

herd_status herd_tb_flush(herd_tb_writer *w)
{
    size_t done = 0;
    while (done < w->pending_len) {
        ssize_t n = write(w->fd, w->pending + done, w->pending_len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return HERD_ERR(HERD_ERR_IO, "cannot write the TensorBoard event file '%s': %s; check "
                            "the disk space of --logdir", w->path, strerror(errno));
        done += (size_t)n;
    }
    w->pending_len = 0;
    w->last_flush = herd_now();
    return HERD_OK;
}

static herd_status write_event(herd_tb_writer *w, Tensorboard__Event *ev)
{
    ev->wall_time = unix_time();
    size_t len = tensorboard__event__get_packed_size(ev);
    size_t need = w->pending_len + len + HERD_TFRECORD_OVERHEAD;
    if (need > w->pending_cap) {
        size_t cap = need > 2 * w->pending_cap ? need : 2 * w->pending_cap;
        uint8_t *p = realloc(w->pending, cap);
        if (!p)
            return HERD_NOMEM(cap);
        w->pending = p;
        w->pending_cap = cap;
    }
    uint8_t *msg = malloc(len ? len : 1);
    if (!msg)
        return HERD_NOMEM(len);
    tensorboard__event__pack(ev, msg);
    herd_tfrecord_frame(msg, len, w->pending + w->pending_len);
    free(msg);
    w->pending_len += len + HERD_TFRECORD_OVERHEAD;
    if (w->pending_len >= FLUSH_BYTES || herd_now() - w->last_flush >= FLUSH_EVERY_S)
        return herd_tb_flush(w);
    return HERD_OK;
}

/* Exclusive create, so two runs started in the same second never share a file. */
static herd_status create_file(herd_tb_writer *w, const char *logdir)
{
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    long t = (long)time(NULL);
    for (int n = 0; n < 100; n++) {
        free(w->path);
        w->path = NULL;
        int len = n == 0 ? asprintf(&w->path, "%s/events.out.tfevents.%ld.%s", logdir, t, host)
                         : asprintf(&w->path, "%s/events.out.tfevents.%ld.%s.%d", logdir, t, host, n);
        if (len < 0) {
            w->path = NULL;
            return HERD_NOMEM(strlen(logdir) + 64);
        }
        w->fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (w->fd >= 0)
            return HERD_OK;
        if (errno != EEXIST)
            return HERD_ERR(HERD_ERR_IO, "cannot create the TensorBoard event file '%s': %s; check "
                            "--logdir", w->path, strerror(errno));
    }
    return HERD_ERR(HERD_ERR_IO, "too many event files named '%s' in '%s'; use another --logdir",
                    w->path, logdir);
}

herd_status herd_tb_writer_open(const char *logdir, herd_tb_writer **out)
{
    *out = NULL;
    if (!logdir || !*logdir)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--logdir needs a directory");
    HERD_TRY(herd_make_dirs(logdir, "--logdir"));
    herd_tb_writer *w = calloc(1, sizeof *w);
    if (!w)
        return HERD_NOMEM(sizeof *w);
    w->fd = -1;
    w->last_flush = herd_now();
    herd_status st = create_file(w, logdir);
    if (st == HERD_OK) {
        Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
        ev.what_case = TENSORBOARD__EVENT__WHAT_FILE_VERSION;
        ev.file_version = "brain.Event:2";
        st = write_event(w, &ev);
    }
    if (st == HERD_OK)
        st = herd_tb_flush(w); /* TensorBoard lists the run from its first record */
    if (st != HERD_OK) {
        herd_tb_writer_close(w);
        return st;
    }
    *out = w;
    return HERD_OK;
}

const char *herd_tb_writer_path(const herd_tb_writer *w) { return w->path; }

herd_status herd_tb_write_scalars(herd_tb_writer *w, long step, const herd_tb_scalar *s, size_t n)
{
    Tensorboard__Summary__Value *values = calloc(n ? n : 1, sizeof *values);
    Tensorboard__Summary__Value **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    herd_status st = HERD_OK;
    if (!values || !ptrs) {
        st = HERD_NOMEM(n * (sizeof *values + sizeof *ptrs));
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        tensorboard__summary__value__init(&values[i]);
        values[i].tag = (char *)s[i].tag;
        values[i].value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        values[i].simple_value = (float)s[i].value;
        ptrs[i] = &values[i];
    }
    Tensorboard__Summary summary = TENSORBOARD__SUMMARY__INIT;
    summary.n_value = n;
    summary.value = ptrs;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    st = write_event(w, &ev);
done:
    free(values);
    free(ptrs);
    return st;
}

herd_status herd_tb_write_histogram(herd_tb_writer *w, long step, const char *tag, const float *x,
                                    size_t n)
{
    double lo = DBL_MAX, hi = -DBL_MAX, sum = 0, sum_sq = 0, num = 0;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (!isfinite(v))
            continue;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
        sum += v;
        sum_sq += v * v;
        num++;
    }
    if (num == 0)
        lo = hi = 0;
    /* Equal-width buckets over [min, max]; TensorBoard re-bins for display. */
    int n_buckets = hi > lo ? HISTOGRAM_BUCKETS : 1;
    double limits[HISTOGRAM_BUCKETS], counts[HISTOGRAM_BUCKETS] = {0};
    double width = (hi - lo) / n_buckets;
    for (int b = 0; b < n_buckets; b++)
        limits[b] = b == n_buckets - 1 ? hi : lo + width * (b + 1);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (!isfinite(v))
            continue;
        int b = n_buckets == 1 ? 0 : (int)((v - lo) / width);
        counts[b < n_buckets ? b : n_buckets - 1]++;
    }
    Tensorboard__HistogramProto histo = TENSORBOARD__HISTOGRAM_PROTO__INIT;
    histo.min = lo;
    histo.max = hi;
    histo.num = num;
    histo.sum = sum;
    histo.sum_squares = sum_sq;
    histo.n_bucket_limit = histo.n_bucket = (size_t)n_buckets;
    histo.bucket_limit = limits;
    histo.bucket = counts;
    Tensorboard__Summary__Value value = TENSORBOARD__SUMMARY__VALUE__INIT;
    value.tag = (char *)tag;
    value.value_case = TENSORBOARD__SUMMARY__VALUE__VALUE_HISTO;
    value.histo = &histo;
    Tensorboard__Summary__Value *ptr = &value;
    Tensorboard__Summary summary = TENSORBOARD__SUMMARY__INIT;
    summary.n_value = 1;
    summary.value = &ptr;
    Tensorboard__Event ev = TENSORBOARD__EVENT__INIT;
    ev.step = step;
    ev.what_case = TENSORBOARD__EVENT__WHAT_SUMMARY;
    ev.summary = &summary;
    return write_event(w, &ev);
}

herd_status herd_tb_writer_close(herd_tb_writer *w)
{
    if (!w)
        return HERD_OK;
    herd_status st = w->fd >= 0 ? herd_tb_flush(w) : HERD_OK;
    if (w->fd >= 0 && close(w->fd) != 0 && st == HERD_OK)
        st = HERD_ERR(HERD_ERR_IO, "cannot close the TensorBoard event file '%s': %s", w->path,
                      strerror(errno));
    free(w->pending);
    free(w->path);
    free(w);
    return st;
}
