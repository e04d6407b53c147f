/* Console progress: a bar redrawn in place on terminals, plain log lines otherwise. */
#include <stdio.h>
#include <unistd.h>

#include "core/clock.h"
#include "herd/herd.h"

static void format_duration(double s, char *buf, size_t len)
{
    long t = s < 0 ? 0 : (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, len, "%lds", t);
}

/* "  loss scale 32768 (2 skipped)" while dynamic loss scaling is on, else nothing. */
static void loss_scale_text(const herd_progress *p, char *buf, size_t len)
{
    buf[0] = '\0';
    if (p->loss_scale > 0)
        snprintf(buf, len, "  loss scale %.10g (%ld skipped)", p->loss_scale, p->skipped_steps);
}

/* One call for the whole line (after `clear`): stderr is unbuffered, and under mpirun
 * another rank's output could land between the pieces of a line written in several. */
static void epoch_line(FILE *out, const char *clear, const herd_progress *p)
{
    char el[32];
    if (p->elapsed_s < 60) /* tenths: time-to-accuracy comparisons read this */
        snprintf(el, sizeof el, "%.1fs", p->elapsed_s);
    else
        format_duration(p->elapsed_s, el, sizeof el);
    char test[160] = "";
    if (p->evaluated)
        snprintf(test, sizeof test, "  test_loss %.4f  test_acc %.2f%%", p->test_loss, 100 * p->test_acc);
    char scale[64];
    loss_scale_text(p, scale, sizeof scale);
    fprintf(out, "%sepoch %d/%d  loss %.4f  acc %.2f%%%s  lr %.4g%s  %.0f samples/s  elapsed %s\n", clear,
            p->epoch, p->epochs, p->loss, 100 * p->acc, test, p->lr, scale, p->samples_per_s, el);
}

bool herd_console_progress_fn(const herd_progress *p, void *user)
{
    herd_console_progress *c = user;
    FILE *out = c->stream ? c->stream : stderr;
    bool tty = !c->force_plain && isatty(fileno(out));
    if (p->epoch_end) {
        epoch_line(out, tty ? "\r\033[K" : "", p);
        fflush(out);
        return true;
    }
    char eta[32];
    format_duration(p->eta_s, eta, sizeof eta);
    if (tty) {
        double now = herd_now();
        if (now - c->last_draw < 0.1 && p->step != p->steps_per_epoch)
            return true;
        c->last_draw = now;
        enum { WIDTH = 24 };
        int filled = (int)(WIDTH * p->step / (p->steps_per_epoch ? p->steps_per_epoch : 1));
        char bar[WIDTH + 1];
        for (int i = 0; i < WIDTH; i++)
            bar[i] = i < filled ? '#' : '.';
        bar[WIDTH] = '\0';
        fprintf(out, "\r\033[Kepoch %d/%d [%s] %ld/%ld  loss %.4f  acc %.2f%%  %.0f samples/s  ETA %s",
                p->epoch, p->epochs, bar, p->step, p->steps_per_epoch, p->loss, 100 * p->acc,
                p->samples_per_s, eta);
        fflush(out);
        return true;
    }
    int every = c->log_every > 0 ? c->log_every : 50;
    if (p->step % every == 0 || p->step == p->steps_per_epoch) {
        char scale[64];
        loss_scale_text(p, scale, sizeof scale);
        fprintf(out, "epoch %d/%d step %ld/%ld  loss %.4f  acc %.2f%%  lr %.4g%s  %.0f samples/s  ETA %s\n",
                p->epoch, p->epochs, p->step, p->steps_per_epoch, p->loss, 100 * p->acc, p->lr,
                scale, p->samples_per_s, eta);
        fflush(out);
    }
    return true;
}
