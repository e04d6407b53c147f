/* oneDNN plumbing shared by the CPU backend's convolution and pooling files. */
#ifndef HERD_BACKEND_CPU_DNNL_H
#define HERD_BACKEND_CPU_DNNL_H

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"

/* The process-wide CPU engine and stream (created once, never destroyed). */
herd_status herd_dnnl_get(dnnl_engine_t *engine, dnnl_stream_t *stream);

/* Turns a failing oneDNN call into HERD_ERR_INTERNAL naming what failed. */
#define HERD_DNNL(call, what)                                                              \
    do {                                                                                   \
        dnnl_status_t herd_dnnl_st_ = (call);                                              \
        if (herd_dnnl_st_ != dnnl_success)                                                 \
            return HERD_ERR(HERD_ERR_INTERNAL, "oneDNN %s failed: %s (status %d)", (what),   \
                            herd_dnnl_status_str(herd_dnnl_st_), (int)herd_dnnl_st_);      \
    } while (0)

const char *herd_dnnl_status_str(dnnl_status_t st);

/* One argument of a primitive execution. */
static inline dnnl_exec_arg_t herd_dnnl_arg(int which, dnnl_memory_t mem)
{
    dnnl_exec_arg_t a = {which, mem};
    return a;
}

#include <stdbool.h>

/*
 * One tensor argument of a primitive: `user` wraps the caller's plain-layout
 * pointer (set per call); `inner` is the layout the primitive chose. When they
 * differ, `inner` owns a buffer allocated once and `reorder` converts between
 * them (user -> inner for inputs, inner -> user for outputs).
 */
typedef struct herd_dnnl_port {
    dnnl_memory_t user;
    dnnl_memory_t inner; /* == user when no reorder is needed */
    dnnl_primitive_t reorder;
    void *inner_buf;
    size_t inner_bytes;
    bool round_bf16; /* inputs: inner holds the caller's values rounded to bf16 */
    bool transient;  /* inner_buf is lent by herd_dnnl_port_bind for one call, not owned */
    struct herd_dnnl_shared_weights *shared; /* herd_dnnl_port_in_weights' copy, if any */
} herd_dnnl_port;

herd_status herd_dnnl_port_init(herd_dnnl_port *port, const dnnl_memory_desc_t *user_md,
                                const dnnl_memory_desc_t *prim_md, bool is_input,
                                const char *what);
/* An fp32 input port whose copy is rounded to bf16 after each reorder: bf16's
 * numerics on fp32 kernels (HERD_CPU_BF16=emulate). */
herd_status herd_dnnl_port_init_bf16_rounded(herd_dnnl_port *port,
                                            const dnnl_memory_desc_t *user_md,
                                            const dnnl_memory_desc_t *prim_md, const char *what);
/* A port whose copy lives only during a call: its buffer is bound before each use
 * (herd_dnnl_port_bind), from the arena below. */
herd_status herd_dnnl_port_init_transient(herd_dnnl_port *port, const dnnl_memory_desc_t *user_md,
                                          const dnnl_memory_desc_t *prim_md, bool is_input,
                                          bool round_bf16, const char *what);
/* Bytes a transient port needs bound (0: it reads or writes the caller's tensor). */
size_t herd_dnnl_port_transient_bytes(const herd_dnnl_port *port);
herd_status herd_dnnl_port_bind(herd_dnnl_port *port, void *buf, const char *what);
void herd_dnnl_port_free(herd_dnnl_port *port);
/* herd_dnnl_port_in for weights (cpu_shared_weights.c): the ports that read the same
 * weights in the same layouts share one reordered copy, made again only when the
 * weights' bytes change; the copy is the one each port would have made. */
herd_status herd_dnnl_port_in_weights(herd_dnnl_port *port, const void *data, const char *what);
/* Leaves the shared copy (herd_dnnl_port_free does). */
void herd_dnnl_port_unshare(herd_dnnl_port *port);

/*
 * The transient arena: copies a primitive needs during one call only (reordered
 * outputs and output gradients, scratchpads) come from one buffer shared by every
 * plan of the process, as big as the largest plan's need. Before it, each plan held
 * its own (resnet50 at batch 32: 5.6 GiB of workspace, 1.9 GiB with the arena). A plan
 * joins with its need when built and leaves when freed; the arena is freed with its
 * last plan. A call holds an arena throughout; calls at once (threads) hold one each,
 * so there are as many as ever ran together. `kept` says whether the arena still holds
 * what the same owner left in it (nothing else used it since, and it did not move).
 */
typedef struct herd_dnnl_arena_hold {
    char *base;
    bool kept;
    int slot;
} herd_dnnl_arena_hold;
herd_status herd_dnnl_arena_join(size_t bytes);
void herd_dnnl_arena_leave(void);
herd_status herd_dnnl_arena_lock(const void *owner, herd_dnnl_arena_hold *h);
void herd_dnnl_arena_unlock(const herd_dnnl_arena_hold *h);
/* Points the port at the caller's data; inputs are reordered into `inner` now. */
herd_status herd_dnnl_port_in(herd_dnnl_port *port, const void *data, const char *what);
/* Points the port at the caller's output; call herd_dnnl_port_out_finish after the primitive. */
herd_status herd_dnnl_port_out(herd_dnnl_port *port, void *data, const char *what);
herd_status herd_dnnl_port_out_finish(herd_dnnl_port *port, const char *what);

/* The two halves of herd_dnnl_create, for callers that look at the implementation
 * oneDNN chose before paying for its code (create_prim frees pd when it fails). */
herd_status herd_dnnl_create_pd(const void *op_desc, const_dnnl_primitive_desc_t hint,
                                dnnl_primitive_desc_t *pd, const char *what);
herd_status herd_dnnl_create_prim(dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim,
                                  const char *what);
/* Creates pd and primitive from an op descriptor with a user-managed scratchpad
 * (so the plan can own one buffer for all its primitives). */
herd_status herd_dnnl_create(const void *op_desc, const_dnnl_primitive_desc_t hint,
                             dnnl_primitive_desc_t *pd, dnnl_primitive_t *prim, const char *what);
/* Bytes of scratchpad the primitive needs. */
size_t herd_dnnl_scratchpad_bytes(const_dnnl_primitive_desc_t pd);
/* One scratchpad big enough for every primitive of a plan (pds: n descriptors);
 * *buf and *mem stay NULL when none needs one. */
herd_status herd_dnnl_scratch_init(const const_dnnl_primitive_desc_t *pds, int n, void **buf,
                                   dnnl_memory_t *mem, const char *what);
/* The same without a buffer: *bytes to bind to *mem before each call (0: none needed). */
herd_status herd_dnnl_scratch_init_transient(const const_dnnl_primitive_desc_t *pds, int n,
                                             size_t *bytes, dnnl_memory_t *mem, const char *what);
/* Runs a primitive on the shared stream and waits for it. */
herd_status herd_dnnl_exec(dnnl_primitive_t prim, int nargs, const dnnl_exec_arg_t *args,
                           const char *what);
/* A plain row-major ("abcd" / "a") descriptor. */
herd_status herd_dnnl_plain_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims,
                               bool any_layout);
/* The same with another data type (dnnl_bf16 for bf16 primitives). */
herd_status herd_dnnl_typed_md(dnnl_memory_desc_t *md, int ndims, const dnnl_dim_t *dims,
                               dnnl_data_type_t type, bool any_layout);
#endif
