/*
 * The MPI communicator's set-up and tear-down: MPI_Init (or an MPI the caller already
 * started), the duplicated communicators, half-precision sum operations, the stall
 * watch and the communication thread; and freeing them in the reverse order.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/build_info.h"
#include "core/error.h"
#include "core/half.h"
#include "core/parse.h"
#include "dist/comm.h"
#include "dist/comm_mpi_internal.h"
#include "dist/launcher.h"

#define DEFAULT_STALL_WARNING_S 60.0
#define DEFAULT_TIMEOUT_S 300.0
/* Longest sleep between two MPI_Test calls of a pending collective; see docs. */
#define DEFAULT_POLL_SLEEP_US 50
/* Open MPI moves a shared-memory collective forward only inside MPI calls, one
 * fragment per poll, so a sleep between polls stretches a 1 MiB reduction from
 * ~0.3 ms to tens of ms (measured: resnet20's exposed communication fell from 20 ms
 * to under 1 ms per step). A wait polls flat out this long, which covers a gradient
 * bucket's reduction; only a collective waiting on a late rank goes on to sleep. */
#define DEFAULT_SPIN_US 5000

static void free_mpi_objects(comm_mpi *m)
{
    comm_mpi_algo_fini(m);
    comm_mpi_stall_free(m);
    if (m->fp16_sum != MPI_OP_NULL)
        MPI_Op_free(&m->fp16_sum);
    if (m->bf16_sum != MPI_OP_NULL)
        MPI_Op_free(&m->bf16_sum);
    if (m->half_type != MPI_DATATYPE_NULL)
        MPI_Type_free(&m->half_type);
    if (m->stall_comm != MPI_COMM_NULL)
        MPI_Comm_free(&m->stall_comm);
    if (m->p2p != MPI_COMM_NULL)
        MPI_Comm_free(&m->p2p);
    if (m->world != MPI_COMM_NULL)
        MPI_Comm_free(&m->world);
}

void comm_mpi_destroy(herd_comm *c)
{
    comm_mpi *m = c->impl;
    if (m->thread_started) {
        pthread_mutex_lock(&m->mu);
        m->shutdown = true;
        pthread_cond_signal(&m->work_cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->work_cv);
        pthread_cond_destroy(&m->done_cv);
    }
    free_mpi_objects(m);
    if (m->initialized_mpi)
        MPI_Finalize();
    while (m->free_ops) {
        mpi_op *next = m->free_ops->next;
        free(m->free_ops);
        m->free_ops = next;
    }
    free(m->stage);
    free(m->displs);
    free(m->ring);
    free(m);
    free(c);
}

static void fp16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = herd_float_to_half(herd_half_to_float(a[i]) + herd_half_to_float(b[i]));
}

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = herd_float_to_bf16(herd_bf16_to_float(a[i]) + herd_bf16_to_float(b[i]));
}

const char *comm_mpi_thread_level_name(int level)
{
    switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
    }
}

/* Everything after MPI_Init: communicators, types, the thread. */
static herd_status set_up(comm_mpi *m, MPI_Comm base)
{
    herd_comm *c = m->c;
    char err[384];
    int rc;
#define MPI_CHECK(call, what)                                           \
    if ((rc = (call)) != MPI_SUCCESS) {                                 \
        comm_mpi_describe_error(m, rc, what, err, sizeof err);          \
        return HERD_ERR(HERD_ERR_INTERNAL, "%s", err);                  \
    }
    MPI_CHECK(MPI_Comm_dup(base, &m->world), "MPI_Comm_dup");
    MPI_CHECK(MPI_Comm_dup(base, &m->stall_comm), "MPI_Comm_dup");
    MPI_CHECK(MPI_Comm_dup(base, &m->p2p), "MPI_Comm_dup");
    /* Failures come back as codes so that they carry rank and host in herd's message. */
    MPI_Comm_set_errhandler(m->world, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(m->stall_comm, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(m->p2p, MPI_ERRORS_RETURN);
    MPI_Comm local;
    MPI_CHECK(MPI_Comm_split_type(m->world, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &local),
              "MPI_Comm_split_type");
    MPI_Comm_rank(local, &c->local_rank);
    MPI_Comm_size(local, &c->local_size);
    MPI_Comm_free(&local);
    MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &m->half_type), "MPI_Type_contiguous");
    MPI_CHECK(MPI_Type_commit(&m->half_type), "MPI_Type_commit");
    MPI_CHECK(MPI_Op_create(fp16_sum, 1, &m->fp16_sum), "MPI_Op_create");
    MPI_CHECK(MPI_Op_create(bf16_sum, 1, &m->bf16_sum), "MPI_Op_create");
#undef MPI_CHECK
    comm_mpi_algo_init(m);
    rc = comm_mpi_stall_init(m);
    if (rc < 0)
        return HERD_NOMEM((size_t)c->size * (sizeof(mpi_rank_status) + MPI_HOST_LEN));
    if (rc != MPI_SUCCESS) {
        comm_mpi_describe_error(m, rc, "MPI_Allgather of the host names", err, sizeof err);
        return HERD_ERR(HERD_ERR_INTERNAL, "%s", err);
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->work_cv, NULL);
    pthread_cond_init(&m->done_cv, NULL);
    if (pthread_create(&m->thread, NULL, comm_mpi_thread_main, m) != 0) {
        pthread_mutex_destroy(&m->mu);
        pthread_cond_destroy(&m->work_cv);
        pthread_cond_destroy(&m->done_cv);
        return HERD_ERR(HERD_ERR_INTERNAL, "rank %d on host %s: cannot start the communication thread",
                        c->rank, c->host);
    }
    m->thread_started = true;
    return HERD_OK;
}

/* A wait's tuning variable in microseconds (unset or empty: the default), strictly: a
 * typo would otherwise read as 0 and change how every wait polls without a word. */
static herd_status env_micros(const char *name, double dflt_us, double *out_s)
{
    const char *v = getenv(name);
    double us = dflt_us;
    if (v && *v && !herd_parse_double(v, 0.0, 60e6, &us))
        return HERD_INPUT_ERR(HERD_ERR_INVALID_ARG, "%s='%s' is not a time in microseconds from 0 "
                              "to 60000000; set a number or unset it (default %g)", name, v,
                              dflt_us);
    *out_s = 1e-6 * us;
    return HERD_OK;
}

/* HERD_MPI_INLINE: 1 (unset or empty: the default) or 0, where a blocking collective's
 * caller always hands it to the communication thread (to compare, or to rule it out). */
static herd_status env_inline(bool *out)
{
    const char *v = getenv("HERD_MPI_INLINE");
    *out = !v || !*v || strcmp(v, "1") == 0;
    if (v && *v && strcmp(v, "0") != 0 && strcmp(v, "1") != 0)
        return HERD_INPUT_ERR(HERD_ERR_INVALID_ARG, "HERD_MPI_INLINE='%s' is not 0 or 1; set 0 "
                              "(blocking collectives always on the communication thread), 1, or "
                              "unset it (default 1)", v);
    return HERD_OK;
}

/* The communicator's own part, before any MPI call: the struct, host name and limits. */
static herd_status alloc_comm(const herd_comm_config *cfg, herd_comm **out_c, comm_mpi **out_m)
{
    herd_comm *c = herd_xcalloc(1, sizeof *c);
    comm_mpi *m = c ? herd_xcalloc(1, sizeof *m) : NULL;
    if (!m) {
        free(c);
        return HERD_ERR_NOMEM;
    }
    c->ops = &comm_mpi_ops;
    c->impl = m;
    m->c = c;
    m->world = m->stall_comm = m->p2p = MPI_COMM_NULL;
    m->half_type = MPI_DATATYPE_NULL;
    m->fp16_sum = m->bf16_sum = MPI_OP_NULL;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "unknown");
    c->cfg.stall_warning_s = cfg && cfg->stall_warning_s > 0 ? cfg->stall_warning_s : DEFAULT_STALL_WARNING_S;
    c->cfg.timeout_s = cfg && cfg->timeout_s > 0 ? cfg->timeout_s : DEFAULT_TIMEOUT_S;
    herd_status st = env_micros("HERD_MPI_POLL_US", DEFAULT_POLL_SLEEP_US, &m->poll_sleep_max_s);
    if (st == HERD_OK)
        st = env_micros("HERD_MPI_SPIN_US", DEFAULT_SPIN_US, &m->spin_s);
    if (st == HERD_OK)
        st = env_inline(&m->inline_blocking);
    if (st != HERD_OK) {
        free(m);
        free(c);
        return st;
    }
    *out_c = c;
    *out_m = m;
    return HERD_OK;
}

static void free_comm(comm_mpi *m)
{
    herd_comm *c = m->c;
    free_mpi_objects(m);
    if (m->initialized_mpi)
        MPI_Finalize();
    free(m);
    free(c);
}

herd_status comm_mpi_create_on(MPI_Comm base, const herd_comm_config *cfg, int thread_level,
                               const char *group_name, herd_comm **out)
{
    *out = NULL;
    herd_comm *c;
    comm_mpi *m;
    HERD_TRY(alloc_comm(cfg, &c, &m));
    m->thread_level = thread_level;
    snprintf(m->group_name, sizeof m->group_name, "%s", group_name ? group_name : "");
    MPI_Comm_rank(MPI_COMM_WORLD, &m->job_rank);
    MPI_Comm_rank(base, &c->rank);
    MPI_Comm_size(base, &c->size);
    herd_status st = set_up(m, base);
    if (st != HERD_OK) {
        free_comm(m);
        return st;
    }
    *out = c;
    return HERD_OK;
}

herd_status herd_comm_mpi_create(const herd_comm_config *cfg, herd_comm **out)
{
    *out = NULL;
    int initialized = 0, provided = MPI_THREAD_SINGLE;
    MPI_Initialized(&initialized);
    /* Another MPI's launcher is known from the environment before MPI starts: refuse
     * then, rather than after each rank started a singleton job of its own (Open MPI
     * forks daemons for one; cli_mpi_mismatch once saw that path end in exit 11 without
     * herd's message). The check after MPI_Init below still catches what the family
     * cannot. */
    if (!initialized)
        HERD_TRY(herd_mpi_launcher_check_before_init(herd_mpi_library_version()));
    herd_comm *c;
    comm_mpi *m;
    HERD_TRY(alloc_comm(cfg, &c, &m));
    if (!initialized) {
        /* MULTIPLE: pipeline stages send activations from the training thread while
         * the communication thread runs collectives; data parallelism alone needs only
         * SERIALIZED (one thread calls MPI), checked below. */
        int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS) {
            herd_status st = HERD_ERR(HERD_ERR_INTERNAL, "host %s: MPI_Init_thread failed (error %d)",
                                      c->host, rc);
            free(m);
            free(c);
            return st;
        }
        m->initialized_mpi = true;
    } else {
        MPI_Query_thread(&provided);
    }
    m->thread_level = provided;
    MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c->size);
    m->job_rank = c->rank;
    /* Under another MPI's launcher every rank would run as its own job of one. */
    herd_status st = herd_mpi_launcher_check(herd_mpi_library_version(), c->size, NULL);
    if (st == HERD_OK && provided < MPI_THREAD_SERIALIZED)
        st = HERD_ERR(HERD_ERR_UNSUPPORTED,
                      "rank %d on host %s: the MPI library provides %s but herd's communication "
                      "thread needs MPI_THREAD_SERIALIZED%s",
                      c->rank, c->host, comm_mpi_thread_level_name(provided),
                      initialized ? " (initialise MPI with MPI_Init_thread before herd)" : "");
    if (st == HERD_OK)
        st = set_up(m, MPI_COMM_WORLD);
    if (st != HERD_OK) {
        free_comm(m);
        return st;
    }
    *out = c;
    return HERD_OK;
}
