/* The timeline's agreement on 2 or 3 ranks: when one rank fails to open it (rank 0
 * cannot create the file, another rank runs out of memory) every rank fails, at
 * once rather than at the communication timeout, and learns who failed; afterwards
 * the ranks are still in step and a trace opens and closes. */
#include <string.h>

#include "mpi_common.h"

#include "obs/timeline.h"

/* A buffer request no allocator grants: the failing rank's calloc must return NULL
 * rather than abort under the sanitizers. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

static const size_t HUGE_STEP = (size_t)1 << 40; /* events per step: petabytes of buffer */

/* Every rank fails to open; the ranks that did not fail themselves get `want` in
 * their message. out_of_memory: this rank asks for too large a buffer. */
static void check_all_fail(herd_comm *c, const char *path, bool out_of_memory, bool fails_here,
                           const char *want)
{
    herd_timeline *tl = NULL;
    herd_status st = herd_timeline_open(path, c, out_of_memory ? HUGE_STEP : 8, &tl);
    MT_CHECK(st != HERD_OK && tl == NULL, "open succeeded (%s)", want);
    MT_CHECK(c->trace == NULL, "a failed trace stays detached");
    if (!fails_here)
        MT_CHECK(strstr(herd_last_error(), want) != NULL, "message '%s' lacks '%s'",
                 herd_last_error(), want);
}

int main(void)
{
    herd_comm *c;
    MT_OK(herd_comm_create_default(&(herd_comm_config){0}, &c));
    mt_rank = c->rank;
    char path[64];
    mt_shared_tempfile(c, path);

    check_all_fail(c, "/nonexistent-dir/t.json", false, c->rank == 0,
                   "rank 0 failed: cannot create");
    int last = c->size - 1;
    char who[64];
    snprintf(who, sizeof who, "rank %d failed: out of memory", last);
    check_all_fail(c, path, c->rank == last, c->rank == last, who);
    if (c->size > 2) /* two ranks other than 0: a count, no single message */
        check_all_fail(c, path, c->rank > 0, c->rank > 0, "failed on 2 ranks");

    herd_timeline *tl;
    MT_OK(herd_timeline_open(path, c, 8, &tl));
    herd_timeline_begin_step(tl, 1, 1);
    herd_timeline_add(tl, HERD_TL_STEP, NULL, herd_now(), herd_now());
    MT_OK(herd_timeline_close(tl));
    if (c->rank == 0)
        unlink(path);
    herd_comm_destroy(c);
    return mt_finish("all checks passed");
}
