/* --metrics FILE: one JSON object per line (cJSON), per logging interval and per epoch. */
#include "obs/metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/safetensors.h"

struct herd_metrics_file {
    FILE *f;
    char *path;
};

herd_status herd_metrics_open(const char *path, bool append, herd_metrics_file **out)
{
    *out = NULL;
    if (!path || !*path)
        return HERD_ERR(HERD_ERR_INVALID_ARG, "--metrics needs a file name");
    herd_metrics_file *m = calloc(1, sizeof *m);
    if (!m || !(m->path = strdup(path))) {
        free(m);
        return HERD_NOMEM(strlen(path) + sizeof *m);
    }
    if (!(m->f = fopen(path, append ? "a" : "w"))) {
        herd_status st = HERD_ERR(HERD_ERR_IO, "cannot create the metrics file '%s': %s; check "
                                  "--metrics", path, strerror(errno));
        free(m->path);
        free(m);
        return st;
    }
    *out = m;
    return HERD_OK;
}

herd_status herd_metrics_write(herd_metrics_file *m, const herd_obs_figures *f)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return HERD_NOMEM(sizeof(cJSON));
    cJSON_AddStringToObject(o, "kind", f->epoch_end ? "epoch" : "step");
    cJSON_AddNumberToObject(o, "epoch", f->epoch);
    cJSON_AddNumberToObject(o, "step", (double)f->step);
    const struct { const char *key; double value; } nums[] = {
        {"time_s", f->time_s}, {"train_loss", f->train_loss}, {"train_acc", f->train_acc},
        {"lr", f->lr}, {"samples_per_s", f->samples_per_s}, {"step_ms", f->step_ms},
        {"data_wait_ms", f->data_wait_ms}, {"forward_ms", f->forward_ms},
        {"backward_ms", f->backward_ms}, {"comm_wait_ms", f->comm_wait_ms},
        {"optimizer_ms", f->optimizer_ms},
    };
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++)
        cJSON_AddNumberToObject(o, nums[i].key, nums[i].value);
    if (f->epoch_end && f->evaluated) {
        cJSON_AddNumberToObject(o, "test_loss", f->test_loss);
        cJSON_AddNumberToObject(o, "test_acc", f->test_acc);
    }
    if (f->loss_scale > 0)
        cJSON_AddNumberToObject(o, "loss_scale", f->loss_scale);
    if (f->restarts > 0) {
        cJSON_AddNumberToObject(o, "restarts", f->restarts);
        cJSON_AddNumberToObject(o, "lost_steps", (double)f->lost_steps);
        cJSON_AddNumberToObject(o, "recovery_s", f->recovery_s);
    }
    char *line = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!line)
        return HERD_NOMEM(1024);
    bool ok = fprintf(m->f, "%s\n", line) >= 0 && fflush(m->f) == 0;
    free(line);
    if (!ok)
        return HERD_ERR(HERD_ERR_IO, "cannot write the metrics file '%s': %s; check the disk space",
                        m->path, strerror(errno));
    return HERD_OK;
}

/* Whether a line of the file stays: what the run trained up to the checkpoint. */
static herd_status keep_line(const herd_metrics_file *m, const char *line, int lineno, int epochs_done,
                             long global_step, bool *keep)
{
    cJSON *o = cJSON_ParseWithOpts(line, NULL, 1); /* nothing after the object, as herd plot */
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    const cJSON *epoch = cJSON_GetObjectItemCaseSensitive(o, "epoch");
    const cJSON *step = cJSON_GetObjectItemCaseSensitive(o, "step");
    bool ok = cJSON_IsString(kind) && cJSON_IsNumber(epoch) && cJSON_IsNumber(step);
    if (ok) {
        bool is_epoch = strcmp(kind->valuestring, "epoch") == 0;
        *keep = step->valuedouble <= (double)global_step &&
                (!is_epoch || epoch->valuedouble <= (double)epochs_done);
    }
    cJSON_Delete(o);
    if (!ok)
        return HERD_ERR(HERD_ERR_FORMAT, "'%s' line %d is not a herd metrics record ('%.60s'); a resumed "
                        "run rewrites the file up to its checkpoint: move it away or give another --metrics",
                        m->path, lineno, line);
    return HERD_OK;
}

herd_status herd_metrics_rewind(herd_metrics_file *m, int epochs_done, long global_step)
{
    if (!m)
        return HERD_OK;
    if (fclose(m->f) != 0) {
        m->f = NULL;
        return HERD_ERR(HERD_ERR_IO, "cannot close the metrics file '%s': %s", m->path, strerror(errno));
    }
    m->f = NULL;
    char *text;
    HERD_TRY(herd_read_text(m->path, "metrics file", "check --metrics", &text));
    /* Kept lines are copied down in place; an unterminated last line is a write cut
     * short by a kill, and goes. */
    size_t out = 0;
    herd_status st = HERD_OK;
    char *line = text;
    for (int lineno = 1; st == HERD_OK; lineno++) {
        char *nl = strchr(line, '\n');
        if (!nl)
            break;
        *nl = '\0';
        bool keep = false;
        if (*line)
            st = keep_line(m, line, lineno, epochs_done, global_step, &keep);
        if (keep) {
            size_t len = (size_t)(nl - line);
            memmove(text + out, line, len);
            text[out + len] = '\n';
            out += len + 1;
        }
        line = nl + 1;
    }
    if (st == HERD_OK) {
        const void *parts[] = {text};
        st = herd_write_file_atomic(m->path, parts, &out, 1);
    }
    free(text);
    if (st == HERD_OK && !(m->f = fopen(m->path, "a")))
        st = HERD_ERR(HERD_ERR_IO, "cannot reopen the metrics file '%s': %s", m->path, strerror(errno));
    return st;
}

herd_status herd_metrics_close(herd_metrics_file *m)
{
    if (!m)
        return HERD_OK;
    herd_status st = HERD_OK;
    if (m->f && fclose(m->f) != 0)
        st = HERD_ERR(HERD_ERR_IO, "cannot close the metrics file '%s': %s", m->path, strerror(errno));
    free(m->path);
    free(m);
    return st;
}
