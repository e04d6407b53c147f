/* A language model's token table, tied to a head on another pipeline stage: the
 * embedding's stage and the last stage each hold it (tied_sum.h, pipeline.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/testhook.h"
#include "dist/signature.h"
#include "train/pipeline.h"

/* pipeline.c's tags are 11..14, pipeline_parts.c's 18. */
enum { TAG_TIED_COPY = 15, TAG_TIED_SUM = 16, TAG_TIED_CHECK = 17, TAG_TIED_SLICE = 19 };

static herd_status transfer(herd_comm *c, bool send, void *buf, size_t bytes, int peer, int tag,
                            const char *what)
{
    herd_p2p req;
    HERD_TRY(c->ops->p2p_start(c, &req, send, buf, bytes, peer, tag));
    return c->ops->p2p_wait(c, &req, what);
}

static int layer_named(const herd_model *m, const char *name)
{
    for (int i = 0; i < m->n_layers; i++)
        if (strcmp(m->layers[i].spec.name, name) == 0)
            return i;
    return -1;
}

herd_status herd_pipeline_tied_find(herd_pipeline *pp, const herd_model *whole)
{
    pp->tied = false;
    pp->tied_floats = 0;
    const herd_layer *head = &whole->layers[whole->n_layers - 1];
    int emb = strcmp(head->spec.type, "lm_head") == 0 ? layer_named(whole, head->spec.tie) : -1;
    int last = pp->stages - 1, es = 0;
    if (emb < 0)
        return HERD_OK;
    while (es < last && emb >= pp->bounds[es + 1])
        es++;
    if (es == last) /* one stage holds both: the head reads the embedding's table */
        return HERD_OK;
    const herd_layer_spec *e = &whole->layers[emb].spec;
    if (e->vocab != whole->classes)
        return HERD_ERR(HERD_ERR_INVALID_ARG,
                        "lm_head layer '%s' is tied to the token table of '%s' (vocabulary %d) "
                        "but predicts %d classes: split from its embedding by pipeline stages, "
                        "the head keeps a copy of the table, which needs the vocabulary to be "
                        "the classes", head->spec.name, e->name, e->vocab, whole->classes);
    pp->tied_stage = es;
    /* This rank's rows of the table (its tensor part's): the same on both stages. */
    const herd_model *m = pp->m;
    const herd_tensor_view *v = NULL;
    if (pp->stage == last)
        v = &m->views[m->layers[m->n_layers - 1].shared_view];
    else if (pp->stage == es)
        v = &m->views[m->layers[emb - pp->bounds[es]].first_tensor];
    if (v && pp->stage == last && v->offset + v->numel != m->n_param_floats)
        return HERD_ERR(HERD_ERR_INTERNAL, "the last stage's copy of the token table does "
                        "not end its parameters");
    pp->tied = true;
    pp->tied_at = v ? v->offset : 0;
    pp->tied_floats = v ? v->numel : 0;
    return HERD_OK;
}

size_t herd_pipeline_whole_share(const herd_pipeline *pp)
{
    return pp->m->n_param_floats - (pp->stage == pp->stages - 1 ? pp->tied_floats : 0);
}

/* The job rank of this replica's other holder of the table. */
static int tied_peer(const herd_pipeline *pp)
{
    bool from = pp->stage == pp->tied_stage;
    return pp->replica * pp->stages + (from ? pp->stages - 1 : pp->tied_stage);
}

herd_status herd_pipeline_tied_slices_setup(herd_pipeline *pp, const herd_model *whole)
{
    if (!pp->tied || (pp->stage != pp->tied_stage && pp->stage != pp->stages - 1))
        return HERD_OK;
    if (pp->synced_bn)
        return HERD_ERR(HERD_ERR_UNSUPPORTED, "--deterministic --sync-bn with --pipeline-stages "
                        "and a language model ('%s') whose head is tied to a token table on "
                        "another stage is not supported; drop one of them", whole->name);
    pp->tied_slices = true;
    const herd_layer *head = &whole->layers[whole->n_layers - 1];
    int emb = layer_named(whole, head->spec.tie) - pp->bounds[pp->tied_stage];
    for (int i = 0; i < pp->n_slots; i++) {
        herd_pp_slot *sl = &pp->slots[i];
        if (pp->stage == pp->tied_stage) { /* as the embedding does after its head */
            sl->m->layers[emb].grad_shared = true;
            continue;
        }
        herd_mem_category was = herd_mem_category_set(HERD_MEM_GRADS);
        sl->tied_grad = pp->m->be->alloc((pp->tied_floats ? pp->tied_floats : 1) * sizeof(float));
        herd_mem_category_set(was);
        if (!sl->tied_grad)
            return HERD_ERR_NOMEM; /* the allocator said why */
    }
    return HERD_OK;
}

herd_status herd_pipeline_tied_slice_done(herd_pipeline *pp, herd_pp_slot *sl)
{
    if (!sl->send_tied.active)
        return HERD_OK;
    char what[96];
    snprintf(what, sizeof what, "stage %d: sending the token table's gradient of micro-batch %d",
             pp->stage, sl->mb);
    return pp->job->ops->p2p_wait(pp->job, &sl->send_tied, what);
}

herd_status herd_pipeline_tied_slice_out(herd_pipeline *pp, herd_pp_slot *sl)
{
    if (!pp->tied_slices || pp->stage != pp->stages - 1)
        return HERD_OK;
    const herd_backend *be = pp->m->be;
    float *g = pp->m->grads + pp->tied_at;
    HERD_TRY(herd_pipeline_tied_slice_done(pp, sl));
    HERD_TRY(be->copy(pp->tied_floats, g, sl->tied_grad));
    HERD_TRY(be->fill(pp->tied_floats, 0.0f, g)); /* counted on the embedding's stage */
    return pp->job->ops->p2p_start(pp->job, &sl->send_tied, true, sl->tied_grad,
                                   pp->tied_floats * sizeof(float), tied_peer(pp), TAG_TIED_SLICE);
}

herd_status herd_pipeline_tied_slice_in(herd_pipeline *pp, herd_p2p *req)
{
    if (!pp->tied_slices || pp->stage != pp->tied_stage)
        return HERD_OK;
    return pp->job->ops->p2p_start(pp->job, req, false, pp->m->grads + pp->tied_at,
                                   pp->tied_floats * sizeof(float), tied_peer(pp), TAG_TIED_SLICE);
}

herd_status herd_pipeline_tied_copy(herd_pipeline *pp, herd_optimizer *opt, bool first_replica)
{
    bool from = pp->stage == pp->tied_stage, to = pp->stage == pp->stages - 1;
    if (!pp->tied || (!from && !to) || (first_replica && pp->replica != 0))
        return HERD_OK;
    int peer = tied_peer(pp);
    int pieces = 1 + (opt ? herd_optimizer_state_count(opt) : 0);
    for (int i = 0; i < pieces; i++) {
        size_t numel = pp->m->n_param_floats;
        const char *name = "parameters";
        float *base = i == 0 ? pp->m->params : herd_optimizer_state(opt, i - 1, &name, &numel);
        if (!base || numel < pp->tied_at + pp->tied_floats)
            return HERD_ERR(HERD_ERR_INTERNAL, "stage %d: the optimizer's '%s' does not cover "
                            "the token table", pp->stage, name);
        char what[128];
        snprintf(what, sizeof what, "stage %d: %s the token table's %s", pp->stage,
                 from ? "sending the last stage" : "receiving", name);
        HERD_TRY(transfer(pp->job, from, base + pp->tied_at, pp->tied_floats * sizeof(float), peer,
                          TAG_TIED_COPY, what));
    }
    return HERD_OK;
}

/* [a, b) of the table held by a rank: its side (1 the embedding's stage, 2 the last),
 * replica and range in table coordinates. */
typedef struct held {
    int64_t side, replica, a, b;
} held;

static void add_parts(herd_tied_sum *t, const held *all, int ranks, const held *me, bool sliced,
                      size_t tied_at, size_t *scratch)
{
    for (int q = 0; q < ranks; q++) {
        const held *o = &all[q];
        if (o->side != 3 - me->side)
            continue;
        /* Without ZeRO both stages of a replica hold all of it: each pairs with its own
         * replica's. ZeRO's slices cover the table once per stage: every overlap pairs. */
        int64_t a = sliced ? (me->a > o->a ? me->a : o->a) : me->a;
        int64_t b = sliced ? (me->b < o->b ? me->b : o->b) : me->b;
        if (b <= a || (!sliced && o->replica != me->replica))
            continue;
        if (t->parts)
            t->parts[t->n_parts] = (herd_tied_part){.peer = q, .at = tied_at + (size_t)a,
                                                    .n = (size_t)(b - a), .scratch = *scratch};
        t->n_parts++;
        *scratch += (size_t)(b - a);
    }
}

herd_status herd_pipeline_tied_plan(herd_pipeline *pp, herd_step_plan *plan)
{
    herd_tied_sum *t = &pp->tied_sum;
    t->job = pp->job;
    if (!pp->tied)
        return HERD_OK;
    plan->tied = t;
    bool sliced = plan->zero != NULL;
    size_t lo = sliced ? plan->zero->lo : 0, hi = sliced ? plan->zero->hi : pp->m->n_param_floats;
    held me = {.side = pp->stage == pp->tied_stage ? 1 : pp->stage == pp->stages - 1 ? 2 : 0,
               .replica = pp->replica};
    if (me.side) {
        size_t end = pp->tied_at + pp->tied_floats;
        size_t a = lo > pp->tied_at ? lo : pp->tied_at, b = hi < end ? hi : end;
        me.a = (int64_t)(a - pp->tied_at);
        me.b = b > a ? (int64_t)(b - pp->tied_at) : me.a;
    }
    if (me.side == 2)
        t->copy_at = pp->tied_at;
    herd_comm *c = herd_comm_host_side(pp->job);
    held *all = herd_xcalloc((size_t)c->size, sizeof *all);
    herd_status st = herd_agree(pp->world, all ? HERD_OK : HERD_ERR_NOMEM,
                                "planning the tied token table's sums");
    if (st != HERD_OK) {
        free(all);
        return st;
    }
    st = c->ops->allgather(c, &me, all, sizeof me);
    size_t floats = 0;
    if (st == HERD_OK && me.side) {
        add_parts(t, all, c->size, &me, sliced, pp->tied_at, &floats);
        t->parts = herd_xcalloc((size_t)t->n_parts + 1, sizeof *t->parts);
        t->reqs = herd_xcalloc(2 * (size_t)t->n_parts + 1, sizeof *t->reqs);
        herd_mem_category was = herd_mem_category_set(HERD_MEM_GRADS);
        t->scratch = floats ? pp->m->be->alloc(floats * sizeof(float)) : NULL;
        herd_mem_category_set(was);
        if (!t->parts || !t->reqs || (floats && !t->scratch))
            st = HERD_ERR_NOMEM;
        t->n_parts = 0, floats = 0;
        if (st == HERD_OK)
            add_parts(t, all, c->size, &me, sliced, pp->tied_at, &floats);
    }
    free(all);
    return herd_agree(pp->world, st, "planning the tied token table's sums");
}

herd_status herd_tied_sum_run(herd_tied_sum *t, const herd_backend *be, float *grads)
{
    herd_comm *c = t->job;
    for (int k = 0; k < t->n_parts; k++) {
        const herd_tied_part *p = &t->parts[k];
        HERD_TRY(c->ops->p2p_start(c, &t->reqs[2 * k], false, t->scratch + p->scratch,
                                   p->n * sizeof(float), p->peer, TAG_TIED_SUM));
        HERD_TRY(c->ops->p2p_start(c, &t->reqs[2 * k + 1], true, grads + p->at,
                                   p->n * sizeof(float), p->peer, TAG_TIED_SUM));
    }
    for (int k = 0; k < 2 * t->n_parts; k++)
        HERD_TRY(c->ops->p2p_wait(c, &t->reqs[k], "summing the tied token table's gradients"));
    if (herd_test_hook("untie", c->rank)) /* the tests: this rank's copy drifts apart */
        return HERD_OK;
    for (int k = 0; k < t->n_parts; k++) {
        const herd_tied_part *p = &t->parts[k];
        HERD_TRY(be->add(p->n, grads + p->at, t->scratch + p->scratch, grads + p->at));
    }
    return HERD_OK;
}

void herd_tied_sum_free(herd_tied_sum *t, const herd_backend *be)
{
    if (be)
        be->free(t->scratch);
    free(t->parts);
    free(t->reqs);
    memset(t, 0, sizeof *t);
}

/* The first differing value of n floats, or n when they are the same. */
static size_t first_difference(const float *a, const float *b, size_t n)
{
    size_t i = 0;
    while (i < n && memcmp(&a[i], &b[i], sizeof *a) == 0)
        i++;
    return i;
}

/* Replica 0's last stage sends its copy to replica 0's table stage, which compares. */
herd_status herd_pipeline_tied_check(herd_pipeline *pp)
{
    if (!pp->tied)
        return HERD_OK;
    const herd_backend *be = pp->m->be;
    size_t n = pp->tied_floats, bytes = n * sizeof(float);
    bool holder = pp->replica == 0 && pp->stage == pp->tied_stage;
    bool copy = pp->replica == 0 && pp->stage == pp->stages - 1;
    float *recv = NULL, *host = NULL, *table = NULL;
    herd_status st = HERD_OK;
    if (holder) {
        recv = be->alloc(bytes);
        host = be->host_memory ? recv : malloc(bytes);
        table = be->host_memory ? pp->m->params + pp->tied_at : malloc(bytes);
        st = recv && host && table ? HERD_OK : HERD_ERR_NOMEM;
    }
    st = herd_agree(pp->world, st, "checking the tied token table");
    if (st == HERD_OK && copy)
        st = transfer(pp->job, true, pp->m->params + pp->tied_at, bytes, pp->tied_stage,
                      TAG_TIED_CHECK, "sending the copy of the token table");
    if (st == HERD_OK && holder) {
        st = transfer(pp->job, false, recv, bytes, pp->stages - 1, TAG_TIED_CHECK,
                      "receiving the last stage's copy of the token table");
        if (st == HERD_OK && !be->host_memory)
            st = be->memcpy_d2h(host, recv, bytes);
        if (st == HERD_OK && !be->host_memory)
            st = be->memcpy_d2h(table, pp->m->params + pp->tied_at, bytes);
        size_t at = st == HERD_OK ? first_difference(host, table, n) : n;
        if (at < n)
            st = HERD_ERR(HERD_ERR_INTERNAL,
                          "the last pipeline stage's copy of the token table differs from the "
                          "table at value %zu of %zu (%.9g against %.9g): the tied head and "
                          "embedding no longer hold the same weights; this is a bug in herd, "
                          "please report it with the command",
                          at, n, (double)host[at], (double)table[at]);
    }
    if (holder) {
        if (host != recv)
            free(host);
        if (!be->host_memory)
            free(table);
        be->free(recv);
    }
    return herd_agree(pp->world, st, "checking the tied token table");
}
