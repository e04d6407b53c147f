#include "cli.h"

#include <cjson/cJSON.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

FILE *cli_line_begin(cli_line *l, FILE *to)
{
    *l = (cli_line){.to = to};
    l->buf = open_memstream(&l->text, &l->len);
    /* Without memory for a buffer the pieces go out as they come: all of the text still. */
    return l->buf ? l->buf : to;
}

void cli_line_end(cli_line *l)
{
    if (!l->buf)
        return;
    fclose(l->buf);
    /* On a buffered stream (stdout into a pipe) what is pending goes first, so the
     * text starts a write of its own and, under the buffer's size, is all of it. */
    fflush(l->to);
    if (l->text)
        fwrite(l->text, 1, l->len, l->to);
    fflush(l->to);
    free(l->text);
}

int cli_getopt(int argc, char **argv, const char *shortopts, const struct option *longopts,
               int *longindex)
{
    int index = -1;
    int opt = getopt_long(argc, argv, shortopts, longopts, &index);
    if (index < 0 || opt == '?' || opt == ':')
        return opt; /* a short option, the end, or an error getopt already printed */
    /* The word that held the option: the one before the value when the value was a
     * word of its own, else the last one read ("--name" or "--name=value"). */
    const char *word = optarg && optind >= 2 && optarg == argv[optind - 1] ? argv[optind - 2]
                                                                          : argv[optind - 1];
    const char *typed = word + strspn(word, "-");
    size_t len = strcspn(typed, "=");
    const char *name = longopts[index].name;
    if (strlen(name) == len && strncmp(name, typed, len) == 0) {
        if (longindex)
            *longindex = index;
        return opt;
    }
    cli_line line;
    FILE *out = cli_line_begin(&line, stderr);
    fprintf(out, "%s: option '--%.*s' is abbreviated: write", argv[0], (int)len, typed);
    const char *sep = " ";
    for (const struct option *o = longopts; o->name; o++)
        if (strncmp(o->name, typed, len) == 0) {
            fprintf(out, "%s--%s", sep, o->name);
            sep = " or ";
        }
    fputc('\n', out);
    cli_line_end(&line);
    return '?';
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    cli_line line;
    FILE *out = cli_line_begin(&line, stderr);
    fprintf(out, "herd: error: ");
    vfprintf(out, fmt, ap);
    fprintf(out, "\n(see 'herd %s --help')\n", cmd);
    cli_line_end(&line);
    va_end(ap);
    return CLI_USAGE;
}

int cli_fail(herd_status st, const char *what)
{
    fprintf(stderr, "herd: error: %s: %s: %s\n", what, herd_status_name(st), herd_last_error());
    return CLI_FAIL;
}

void cli_summary_str(cli_summary *s, const char *key, const char *value)
{
    if (s->n >= 32)
        return;
    s->keys[s->n] = key;
    snprintf(s->values[s->n], sizeof s->values[0], "%s", value);
    s->nonfinite[s->n] = false;
    s->quoted[s->n++] = true;
}

void cli_summary_num(cli_summary *s, const char *key, double value, int decimals)
{
    if (s->n >= 32)
        return;
    s->keys[s->n] = key;
    s->nonfinite[s->n] = !isfinite(value);
    if (isnan(value)) /* printf's "-nan" would say a sign NaN does not have */
        snprintf(s->values[s->n], sizeof s->values[0], "nan");
    else
        snprintf(s->values[s->n], sizeof s->values[0], "%.*f", decimals, value);
    s->quoted[s->n++] = false;
}

void cli_summary_print(const cli_summary *s, bool json)
{
    cli_line line;
    FILE *out = cli_line_begin(&line, stdout);
    if (json)
        fputc('{', out);
    for (int i = 0; i < s->n; i++) {
        if (json)
            fprintf(out, "%s\"%s\": %s%s%s", i ? ", " : "", s->keys[i], s->quoted[i] ? "\"" : "",
                    s->nonfinite[i] ? "null" : s->values[i], s->quoted[i] ? "\"" : "");
        else
            fprintf(out, "%s%s=%s", i ? " " : "", s->keys[i], s->values[i]);
    }
    fputs(json ? "}\n" : "\n", out);
    cli_line_end(&line);
}

int cli_resolve_device(const char *cmd, const char **device, uint64_t gpu_memory_limit,
                       uint64_t memory_limit)
{
    if (!*device)
        *device = herd_default_device();
    /* sim is a device like cuda: its allocator takes the same cap, so tests can use it. */
    if (gpu_memory_limit && strcmp(*device, "cuda") != 0 && strcmp(*device, "sim") != 0)
        return cli_usage_error(cmd, "--gpu-memory-limit is for GPUs, but the device is %s "
                               "(use --device cuda, or --memory-limit)", *device);
    /* On a GPU both cap the same memory: one would silently override the other. */
    if (gpu_memory_limit && memory_limit)
        return cli_usage_error(cmd, "--memory-limit and --gpu-memory-limit both cap the GPU's "
                               "memory; give one");
    return -1;
}

bool cli_pp_schedule_arg(const char *cmd, const char *flag, const char *value, herd_pp_schedule_kind *out)
{
    if (herd_pp_schedule_parse(value, out) == HERD_OK)
        return true;
    cli_usage_error(cmd, "%s is %s or %s, got '%s'", flag, herd_pp_schedule_name(HERD_PP_SCHEDULE_1F1B),
                    herd_pp_schedule_name(HERD_PP_SCHEDULE_GPIPE), value);
    return false;
}

herd_status cli_prepare_device(herd_dist *dist, const char *device, int threads,
                               uint64_t gpu_memory_limit)
{
    herd_status st = herd_dist_bind_device(dist, device);
    if (st == HERD_OK)
        st = herd_device_set_threads(device, threads, dist);
    if (st == HERD_OK && gpu_memory_limit)
        st = herd_device_set_memory_limit(device, gpu_memory_limit);
    return st;
}

void cli_print_device(const herd_model *m)
{
    const char *device = herd_model_device(m);
    fprintf(stderr, "herd: device %s, precision %s\n", device,
            herd_precision_name(herd_model_precision(m)));
}

void cli_print_json(cJSON *doc)
{
    char *text = cJSON_Print(doc);
    if (text)
        printf("%s\n", text);
    free(text);
    cJSON_Delete(doc);
}

herd_status cli_open_data(const char *spec, herd_split split, const char *model, long seq_len,
                          herd_dataset **out)
{
    herd_status st = herd_dataset_open(spec, split, out);
    if (st == HERD_OK && (st = herd_dataset_fit_seq_len(*out, model, (int)seq_len)) != HERD_OK) {
        herd_dataset_free(*out);
        *out = NULL;
    }
    return st;
}
