/* Graphs on the simulated device: the rules a CUDA graph imposes, checked where they can
 * be seen without a GPU. A capture runs the region with each op checked and recorded but
 * not computed (as CUDA records kernels without running them), and refuses what CUDA
 * refuses while capturing: waiting on the host (host values, copies), allocating,
 * freeing, timer marks. A CUDA launch replays what was recorded without running any
 * host code; the simulated launch runs the region's host code again and checks that it
 * issues the same ops with the same pointers, sizes and step-dependent scalars as the
 * capture, so a region whose host code would have changed something between steps (a
 * seed, a loss scale, a buffer moved) fails here instead of replaying stale values on a
 * GPU. Memory freed since the capture makes a graph stale, as on CUDA. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/sim/sim.h"
#include "core/error.h"

typedef enum { ARRAY, REAL, INTEGER } kind;

typedef struct entry {
    const char *op, *arg;
    const void *p;  /* an array's address */
    uint64_t value; /* an array's bytes, a scalar's bits */
    kind kind;
} entry;

struct herd_graph {
    herd_graph_region region;
    void *user;
    entry *entries;
    size_t n;
    uint64_t frees;
};

typedef enum { IDLE, RECORDING, REPLAYING } mode;

static _Thread_local mode g_mode;
static _Thread_local herd_graph *g_graph; /* being recorded or replayed */
static _Thread_local size_t g_pos, g_cap;
static _Thread_local char g_violation[512]; /* the first refused call, reported at the end */

bool herd_sim_recording(void) { return g_mode == RECORDING; }

static void violate(const char *what)
{
    if (g_mode != IDLE && !g_violation[0])
        snprintf(g_violation, sizeof g_violation, "%s", what);
}

herd_status herd_sim_graph_refuse(const char *op, const char *why)
{
    if (g_mode == IDLE)
        return HERD_OK;
    char what[256];
    snprintf(what, sizeof what, "sim: %s inside a graph's %s: %s", op,
             g_mode == RECORDING ? "capture" : "replay", why);
    violate(what);
    return HERD_ERR(HERD_ERR_UNSUPPORTED, "%s", what);
}

void herd_sim_graph_note_free(void)
{
    violate(g_mode == RECORDING
                ? "sim: free inside a graph's capture: CUDA refuses cudaFree while capturing, "
                  "and the graph would keep the freed pointer"
                : "sim: free inside a graph's replay: a CUDA replay runs no host code, so "
                  "nothing would be freed");
}

/* "op's arg = value" for messages. */
static void describe(const entry *e, char *buf, size_t cap)
{
    double real;
    memcpy(&real, &e->value, sizeof real);
    if (e->kind == ARRAY)
        snprintf(buf, cap, "%s's %s = %p (%llu bytes)", e->op, e->arg, e->p,
                 (unsigned long long)e->value);
    else if (e->kind == REAL)
        snprintf(buf, cap, "%s's %s = %.9g", e->op, e->arg, real);
    else
        snprintf(buf, cap, "%s's %s = %llu", e->op, e->arg, (unsigned long long)e->value);
}

static herd_status note(entry now)
{
    herd_graph *g = g_graph;
    if (g_mode == RECORDING) {
        if (g->n == g_cap) {
            size_t cap = g_cap ? 2 * g_cap : 256;
            entry *e = realloc(g->entries, cap * sizeof *e);
            if (!e)
                return HERD_NOMEM(cap * sizeof *e);
            g->entries = e;
            g_cap = cap;
        }
        g->entries[g->n++] = now;
        return HERD_OK;
    }
    size_t i = g_pos++;
    const entry *e = i < g->n ? &g->entries[i] : NULL;
    if (e && e->kind == now.kind && e->p == now.p && e->value == now.value &&
        !strcmp(e->op, now.op) && !strcmp(e->arg, now.arg))
        return HERD_OK;
    char was[128] = "nothing (the capture ended there)", is[128];
    if (e)
        describe(e, was, sizeof was);
    describe(&now, is, sizeof is);
    char what[400];
    snprintf(what, sizeof what,
             "sim: graph replay: call %zu is %s where the capture had %s: a CUDA graph would "
             "replay the captured values (a region's ops, pointers, sizes and scalars must "
             "not change between its launches)",
             i, is, was);
    violate(what);
    return HERD_ERR(HERD_ERR_INTERNAL, "%s", what);
}

herd_status herd_sim_graph_array(const char *op, const char *arg, const void *p, size_t bytes)
{
    if (g_mode == IDLE)
        return HERD_OK;
    return note((entry){.op = op, .arg = arg, .p = p, .value = bytes, .kind = ARRAY});
}

herd_status herd_sim_graph_real(const char *op, const char *arg, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return g_mode == IDLE ? HERD_OK
                          : note((entry){.op = op, .arg = arg, .value = bits, .kind = REAL});
}

herd_status herd_sim_graph_integer(const char *op, const char *arg, uint64_t v)
{
    return g_mode == IDLE ? HERD_OK
                          : note((entry){.op = op, .arg = arg, .value = v, .kind = INTEGER});
}

/* Runs the region in mode m; the first violation, else the region's status. */
static herd_status run(herd_graph *g, mode m)
{
    g_mode = m;
    g_graph = g;
    g_pos = 0;
    g_violation[0] = '\0';
    herd_status st = g->region(g->user);
    g_mode = IDLE;
    g_graph = NULL;
    if (g_violation[0])
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "%s", g_violation);
    HERD_TRY(st);
    if (m == REPLAYING && g_pos != g->n)
        return HERD_ERR(HERD_ERR_INTERNAL,
                        "sim: graph replay: the region made %zu calls where the capture made %zu: "
                        "a CUDA graph would replay the captured ones",
                        g_pos, g->n);
    return HERD_OK;
}

herd_status herd_sim_graph_capture(herd_graph_region region, void *user, herd_graph **out)
{
    *out = NULL;
    if (g_mode != IDLE)
        return HERD_ERR(HERD_ERR_INTERNAL, "sim: a graph capture inside a graph's region");
    herd_graph *g = calloc(1, sizeof *g);
    if (!g)
        return HERD_NOMEM(sizeof *g);
    g->region = region;
    g->user = user;
    g->frees = herd_sim_frees();
    g_cap = 0;
    herd_status st = run(g, RECORDING);
    if (st != HERD_OK) {
        herd_sim_graph_free(g);
        return st;
    }
    *out = g;
    return HERD_OK;
}

herd_status herd_sim_graph_launch(herd_graph *g, bool *stale)
{
    *stale = g->frees != herd_sim_frees();
    if (*stale)
        return HERD_OK;
    if (g_mode != IDLE)
        return HERD_ERR(HERD_ERR_INTERNAL, "sim: a graph launch inside a graph's region");
    return run(g, REPLAYING);
}

void herd_sim_graph_free(herd_graph *g)
{
    if (!g)
        return;
    free(g->entries);
    free(g);
}
