#include "core/testhook.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char fail_site[64];
static int fail_rank = -1;
static long step_delay_ms;

static void read_env(void)
{
    const char *delay = getenv("HERD_TEST_STEP_DELAY_MS");
    if (delay) {
        char *end;
        long ms = strtol(delay, &end, 10);
        step_delay_ms = *end == '\0' && ms > 0 && ms <= 10000 ? ms : 0;
    }
    const char *v = getenv("HERD_TEST_FAIL_AT");
    const char *colon = v ? strrchr(v, ':') : NULL;
    if (!colon || colon == v || (size_t)(colon - v) >= sizeof fail_site)
        return;
    char *end;
    long r = strtol(colon + 1, &end, 10);
    if (*end || end == colon + 1 || r < 0)
        return;
    memcpy(fail_site, v, (size_t)(colon - v));
    fail_rank = (int)r;
}

bool herd_test_hook(const char *site, int rank)
{
    pthread_once(&once, read_env);
    return rank == fail_rank && strcmp(site, fail_site) == 0;
}

void herd_test_step_delay(void)
{
    pthread_once(&once, read_env);
    if (step_delay_ms <= 0)
        return;
    struct timespec t = {.tv_sec = step_delay_ms / 1000, .tv_nsec = step_delay_ms % 1000 * 1000000L};
    while (nanosleep(&t, &t) != 0) /* a signal cut it short: sleep the rest */
        ;
}

herd_status herd_fail_point(const char *site, int rank)
{
    if (!herd_test_hook(site, rank))
        return HERD_OK;
    return HERD_ERR(HERD_ERR_INTERNAL, "injected failure at %s on rank %d (HERD_TEST_FAIL_AT)",
                    site, rank);
}
