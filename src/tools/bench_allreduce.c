/*
 * Allreduce benchmark in the manner of nccl-tests: a sweep of sizes, each timed on
 * herd's communicator (and optionally MPI_Allreduce called directly on the same
 * buffer), each checked element by element against the exact sum.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/half.h"
#include "tools/bench_internal.h"

static const struct {
    const char *name;
    bench_type type;
} type_names[] = {
    {"float", BENCH_FLOAT}, {"half", BENCH_HALF}, {"bfloat16", BENCH_BFLOAT16},
    {"fp32", BENCH_FLOAT},  {"fp16", BENCH_HALF}, {"bf16", BENCH_BFLOAT16},
};

const char *bench_type_name(bench_type t)
{
    for (size_t i = 0; i < sizeof type_names / sizeof *type_names; i++)
        if (type_names[i].type == t)
            return type_names[i].name;
    return "?";
}

bool bench_parse_type(const char *name, bench_type *out)
{
    for (size_t i = 0; i < sizeof type_names / sizeof *type_names; i++)
        if (strcmp(name, type_names[i].name) == 0) {
            *out = type_names[i].type;
            return true;
        }
    return false;
}

herd_wire_type bench_wire_type(bench_type t)
{
    return t == BENCH_HALF ? HERD_WIRE_FP16 : t == BENCH_BFLOAT16 ? HERD_WIRE_BF16 : HERD_WIRE_FP32;
}

size_t bench_type_size(bench_type t) { return herd_wire_type_size(bench_wire_type(t)); }

uint64_t bench_allreduce_count(bench_type type, uint64_t bytes)
{
    uint64_t count = bytes / bench_type_size(type);
    return count ? count : 1;
}

double bench_allreduce_bus_factor(int ranks) { return 2.0 * (ranks - 1) / ranks; }

/* ------------------------------------------------------------ verification */

/* The largest integer up to which every sum is exact in the type: every partial
 * sum of non-negative integers is at most the total, so the order of additions
 * cannot matter. */
static uint64_t exact_limit(herd_wire_type t)
{
    return t == HERD_WIRE_FP16 ? 2048 : t == HERD_WIRE_BF16 ? 256 : (1u << 24);
}

/* Rank r's value at element i: small integers whose sum over the ranks stays
 * within the exact limit, varying with both so that a misplaced element shows. */
static uint64_t pattern(uint64_t i, int r, int ranks, herd_wire_type t)
{
    uint64_t per_rank_max = exact_limit(t) / (uint64_t)ranks;
    if (per_rank_max == 0) /* more ranks than the limit: one rank holds a 1 */
        return i % (uint64_t)ranks == (uint64_t)r;
    return (i * 7 + (uint64_t)r * 13) % (per_rank_max + 1);
}

static void store(void *buf, uint64_t i, herd_wire_type t, float v)
{
    if (t == HERD_WIRE_FP32)
        ((float *)buf)[i] = v;
    else
        ((uint16_t *)buf)[i] = t == HERD_WIRE_FP16 ? herd_float_to_half(v) : herd_float_to_bf16(v);
}

static float load(const void *buf, uint64_t i, herd_wire_type t)
{
    if (t == HERD_WIRE_FP32)
        return ((const float *)buf)[i];
    uint16_t h = ((const uint16_t *)buf)[i];
    return t == HERD_WIRE_FP16 ? herd_half_to_float(h) : herd_bf16_to_float(h);
}

static void fill(void *buf, uint64_t count, const herd_comm *c, herd_wire_type t)
{
    for (uint64_t i = 0; i < count; i++)
        store(buf, i, t, (float)pattern(i, c->rank, c->size, t));
}

/* Elements of this rank's reduced buffer that differ from the exact sum. */
static int64_t count_wrong(const void *buf, uint64_t count, const herd_comm *c, herd_wire_type t)
{
    int64_t wrong = 0;
    for (uint64_t i = 0; i < count; i++) {
        uint64_t want = 0;
        for (int r = 0; r < c->size; r++)
            want += pattern(i, r, c->size, t);
        wrong += load(buf, i, t) != (float)want;
    }
    return wrong;
}

/* The test hook: the last rank damages one element, as a faulty transport would. */
static void maybe_corrupt(void *buf, uint64_t count, const herd_comm *c,
                          const bench_allreduce_config *cfg)
{
    if (cfg->corrupt && c->rank == c->size - 1 && count > 0) {
        herd_wire_type t = bench_wire_type(cfg->type);
        float v = load(buf, count / 2, t);
        store(buf, count / 2, t, v == 0 ? 1.0f : -v); /* exact in every type */
    }
}

/* Sums #wrong over the ranks (exact in a double up to 2^53). */
static herd_status total_wrong(herd_comm *c, int64_t mine, int64_t *total)
{
    double v = (double)mine;
    HERD_TRY(c->ops->allreduce_f64(c, &v, 1));
    *total = (int64_t)v;
    return HERD_OK;
}

/* Waits until every queued reduction's result is in memory, the GPU's included. */
static herd_status finish(herd_comm *c)
{
    HERD_TRY(c->ops->wait_all(c));
    return c->ops->sync ? c->ops->sync(c) : HERD_OK;
}

/* Fills, reduces as `pieces` equal reductions, checks every element. */
static herd_status verify(herd_comm *c, const bench_allreduce_config *cfg, bench_mem *m,
                          uint64_t count, int pieces, int64_t *wrong)
{
    uint64_t total = count * (uint64_t)pieces;
    herd_wire_type wire = bench_wire_type(cfg->type);
    size_t elem = herd_wire_type_size(wire);
    fill(m->host, total, c, wire);
    HERD_TRY(bench_mem_upload(m, total * elem));
    for (int p = 0; p < pieces; p++)
        HERD_TRY(c->ops->allreduce_typed_start(c, (char *)bench_mem_target(m) + (size_t)p * count * elem,
                                               count, wire, "bench verify"));
    HERD_TRY(finish(c));
    HERD_TRY(bench_mem_download(m, total * elem));
    maybe_corrupt(m->host, total, c, cfg);
    return total_wrong(c, count_wrong(m->host, total, c, wire), wrong);
}

/* ------------------------------------------------------------------ timing */

/* `steps` times: `pieces` reductions of `count` elements started, then waited for.
 * Returns the slowest rank's seconds per step. */
static herd_status time_steps(herd_comm *c, const bench_allreduce_config *cfg, void *buf,
                              uint64_t count, int pieces, int steps, double *seconds)
{
    size_t elem = bench_type_size(cfg->type);
    HERD_TRY(c->ops->barrier(c));
    double start = herd_now();
    for (int s = 0; s < steps; s++) {
        for (int p = 0; p < pieces; p++)
            HERD_TRY(c->ops->allreduce_typed_start(c, (char *)buf + (size_t)p * count * elem, count,
                                                   bench_wire_type(cfg->type), "bench"));
        HERD_TRY(finish(c));
    }
    *seconds = herd_now() - start;
    HERD_TRY(herd_comm_max_f64(c, seconds)); /* a collective's time is its slowest rank's */
    *seconds /= steps > 0 ? steps : 1;
    return HERD_OK;
}

/* Back to back, as nccl-tests times: every reduction queued, one wait at the end. */
static herd_status time_queued(herd_comm *c, const bench_allreduce_config *cfg, void *buf,
                               uint64_t count, int iters, double *seconds)
{
    HERD_TRY(c->ops->barrier(c));
    double start = herd_now();
    for (int i = 0; i < iters; i++)
        HERD_TRY(c->ops->allreduce_typed_start(c, buf, count, bench_wire_type(cfg->type), "bench"));
    HERD_TRY(finish(c));
    *seconds = herd_now() - start;
    HERD_TRY(herd_comm_max_f64(c, seconds));
    *seconds /= iters;
    return HERD_OK;
}

static herd_status time_reference(herd_comm *c, const bench_allreduce_config *cfg, void *buf,
                                  uint64_t count, double *seconds)
{
    double t = 0;
    herd_wire_type wire = bench_wire_type(cfg->type);
    if (cfg->warmup > 0)
        HERD_TRY(c->ops->time_reference_allreduce(c, buf, count, wire, cfg->warmup, &t));
    HERD_TRY(c->ops->barrier(c));
    HERD_TRY(c->ops->time_reference_allreduce(c, buf, count, wire, cfg->iters, &t));
    *seconds = t;
    HERD_TRY(herd_comm_max_f64(c, seconds));
    *seconds /= cfg->iters;
    return HERD_OK;
}

/* ------------------------------------------------------------------- runs */

/* Each host has one local rank 0 (ranks sharing memory: MPI_COMM_TYPE_SHARED). */
static herd_status count_hosts(herd_comm *c, int *hosts)
{
    double first_on_host = c->local_rank == 0;
    HERD_TRY(c->ops->allreduce_f64(c, &first_on_host, 1));
    *hosts = (int)first_on_host;
    return HERD_OK;
}

static herd_status run_size(herd_comm *c, const bench_allreduce_config *cfg, bench_mem *m,
                            uint64_t count, bench_allreduce_row *row)
{
    double bus = bench_allreduce_bus_factor(c->size), seconds = 0;
    void *buf = bench_mem_target(m);
    row->count = count;
    row->bytes = count * bench_type_size(cfg->type);
    HERD_TRY(verify(c, cfg, m, count, 1, &row->wrong));
    if (cfg->warmup > 0)
        HERD_TRY(time_queued(c, cfg, buf, count, cfg->warmup, &seconds));
    HERD_TRY(time_queued(c, cfg, buf, count, cfg->iters, &seconds));
    row->time_us = 1e6 * seconds;
    row->algbw_gbps = (double)row->bytes / seconds / 1e9;
    row->busbw_gbps = row->algbw_gbps * bus;
    row->ref_time_us = row->ref_busbw_gbps = -1;
    if (cfg->compare_reference) {
        HERD_TRY(time_reference(c, cfg, buf, count, &seconds));
        row->ref_time_us = 1e6 * seconds;
        row->ref_busbw_gbps = (double)row->bytes / seconds / 1e9 * bus;
    }
    return HERD_OK;
}

static herd_status run_sweep(herd_comm *c, const bench_allreduce_config *cfg, bench_mem *m,
                             bench_allreduce_result *out)
{
    int cap = 0;
    for (uint64_t b = cfg->min_bytes; b <= cfg->max_bytes; b *= (uint64_t)cfg->factor) {
        cap++;
        if (cfg->factor < 2)
            break;
    }
    out->rows = herd_xcalloc((size_t)cap, sizeof *out->rows);
    if (!out->rows)
        return HERD_ERR_NOMEM;
    double sum = 0, ref_sum = 0;
    uint64_t bytes = cfg->min_bytes;
    for (int i = 0; i < cap; i++, bytes *= (uint64_t)cfg->factor) {
        uint64_t count = bench_allreduce_count(cfg->type, bytes);
        bench_allreduce_row *row = &out->rows[out->n_rows];
        HERD_TRY(run_size(c, cfg, m, count, row));
        out->n_rows++;
        out->wrong += row->wrong;
        sum += row->busbw_gbps;
        ref_sum += row->ref_busbw_gbps;
    }
    out->avg_busbw_gbps = sum / out->n_rows;
    out->ref_avg_busbw_gbps = cfg->compare_reference ? ref_sum / out->n_rows : -1;
    return HERD_OK;
}

static herd_status run_fused(herd_comm *c, const bench_allreduce_config *cfg, bench_mem *m,
                             bench_allreduce_result *out)
{
    void *buf = bench_mem_target(m);
    uint64_t count = bench_allreduce_count(cfg->type, cfg->min_bytes);
    int k = cfg->fused_tensors;
    int64_t wrong = 0;
    double seconds = 0;
    HERD_TRY(verify(c, cfg, m, count, k, &wrong));
    out->wrong += wrong;
    HERD_TRY(verify(c, cfg, m, count * (uint64_t)k, 1, &wrong));
    out->wrong += wrong;
    if (cfg->warmup > 0) {
        HERD_TRY(time_steps(c, cfg, buf, count, k, cfg->warmup, &seconds));
        HERD_TRY(time_steps(c, cfg, buf, count * (uint64_t)k, 1, cfg->warmup, &seconds));
    }
    HERD_TRY(time_steps(c, cfg, buf, count, k, cfg->iters, &seconds));
    out->unfused_us = 1e6 * seconds;
    HERD_TRY(time_steps(c, cfg, buf, count * (uint64_t)k, 1, cfg->iters, &seconds));
    out->fused_us = 1e6 * seconds;
    return HERD_OK;
}

static herd_status check_config(const herd_comm *c, const bench_allreduce_config *cfg)
{
    if (cfg->min_bytes == 0 || cfg->max_bytes < cfg->min_bytes || cfg->factor < 1 ||
        cfg->iters < 1 || cfg->warmup < 0 || cfg->fused_tensors < 0)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "allreduce benchmark: sizes %llu..%llu (factor %d), %d iterations, %d "
                        "warm-up: sizes must be positive and increasing, at least one iteration",
                        (unsigned long long)cfg->min_bytes, (unsigned long long)cfg->max_bytes,
                        cfg->factor, cfg->iters, cfg->warmup);
    if (!c->ops->allreduce_typed_start)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "the %s communicator cannot reduce %s buffers; try --backend mpi",
                        c->ops->name, bench_type_name(cfg->type));
    if (cfg->compare_reference && c->ops->device_memory)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "--compare-mpi times MPI_Allreduce on host buffers; the %s communicator "
                        "reduces GPU memory: compare with a separate --backend mpi run",
                        c->ops->name);
    if (cfg->compare_reference && !c->ops->time_reference_allreduce)
        return HERD_ERR(HERD_ERR_UNSUPPORTED,
                        "the %s communicator has no MPI_Allreduce to compare with (one process); "
                        "run under mpirun, or drop --compare-mpi",
                        c->ops->name);
    return HERD_OK;
}

herd_status bench_allreduce(bench_session *s, const bench_allreduce_config *cfg,
                            bench_allreduce_result *out)
{
    herd_comm *c = bench_session_comm(s);
    memset(out, 0, sizeof *out);
    HERD_TRY(check_config(c, cfg));
    out->backend = c->ops->name;
    out->ranks = c->size;
    out->ref_avg_busbw_gbps = -1;
    HERD_TRY(count_hosts(c, &out->hosts));
    size_t elem = bench_type_size(cfg->type);
    uint64_t bytes = cfg->fused_tensors > 0
                         ? bench_allreduce_count(cfg->type, cfg->min_bytes) * elem * (uint64_t)cfg->fused_tensors
                         : bench_allreduce_count(cfg->type, cfg->max_bytes) * elem;
    bench_mem m;
    herd_status st = bench_mem_alloc(&m, bytes, c->ops->device_memory);
    if (st == HERD_OK)
        st = cfg->fused_tensors > 0 ? run_fused(c, cfg, &m, out) : run_sweep(c, cfg, &m, out);
    bench_mem_free(&m);
    if (st != HERD_OK)
        bench_allreduce_result_free(out);
    return st;
}

void bench_allreduce_result_free(bench_allreduce_result *r)
{
    free(r->rows);
    r->rows = NULL;
    r->n_rows = 0;
}

/* ------------------------------------------------------------------- JSON */

static cJSON *json_row(const bench_allreduce_config *cfg, const bench_allreduce_row *row)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "bytes", (double)row->bytes);
    cJSON_AddNumberToObject(o, "count", (double)row->count);
    cJSON_AddStringToObject(o, "type", bench_type_name(cfg->type));
    cJSON_AddNumberToObject(o, "time_us", row->time_us);
    cJSON_AddNumberToObject(o, "algbw_gbps", row->algbw_gbps);
    cJSON_AddNumberToObject(o, "busbw_gbps", row->busbw_gbps);
    cJSON_AddNumberToObject(o, "wrong", (double)row->wrong);
    if (row->ref_time_us >= 0) {
        cJSON_AddNumberToObject(o, "mpi_time_us", row->ref_time_us);
        cJSON_AddNumberToObject(o, "mpi_busbw_gbps", row->ref_busbw_gbps);
    }
    return o;
}

herd_status bench_allreduce_write_json(const bench_allreduce_config *cfg,
                                       const bench_allreduce_result *r, const char *path)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return HERD_ERR_NOMEM;
    cJSON_AddStringToObject(root, "collective", "allreduce");
    cJSON_AddStringToObject(root, "backend", r->backend);
    cJSON_AddNumberToObject(root, "ranks", r->ranks);
    cJSON_AddNumberToObject(root, "hosts", r->hosts);
    cJSON_AddStringToObject(root, "dtype", bench_type_name(cfg->type));
    cJSON_AddNumberToObject(root, "iters", cfg->iters);
    cJSON *rows = cJSON_AddArrayToObject(root, "results");
    for (int i = 0; rows && i < r->n_rows; i++)
        cJSON_AddItemToArray(rows, json_row(cfg, &r->rows[i]));
    cJSON_AddNumberToObject(root, "avg_busbw_gbps", r->avg_busbw_gbps);
    if (r->ref_avg_busbw_gbps >= 0)
        cJSON_AddNumberToObject(root, "mpi_avg_busbw_gbps", r->ref_avg_busbw_gbps);
    if (cfg->fused_tensors > 0) {
        cJSON *f = cJSON_AddObjectToObject(root, "fusion");
        cJSON_AddNumberToObject(f, "tensors", cfg->fused_tensors);
        uint64_t count = bench_allreduce_count(cfg->type, cfg->min_bytes);
        cJSON_AddNumberToObject(f, "tensor_bytes", (double)(count * bench_type_size(cfg->type)));
        cJSON_AddNumberToObject(f, "unfused_time_us", r->unfused_us);
        cJSON_AddNumberToObject(f, "fused_time_us", r->fused_us);
        cJSON_AddNumberToObject(f, "speedup", r->unfused_us / r->fused_us);
        cJSON_AddNumberToObject(f, "wrong", (double)r->wrong);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text)
        return HERD_ERR_NOMEM;
    FILE *f = fopen(path, "w");
    herd_status st = HERD_OK;
    if (!f)
        st = HERD_ERR(HERD_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    else {
        bool written = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
        if (fclose(f) != 0 || !written)
            st = HERD_ERR(HERD_ERR_IO, "writing %s failed: %s (disk full?)", path, strerror(errno));
    }
    cJSON_free(text);
    return st;
}
