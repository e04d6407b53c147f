/* Monotonic wall clock in seconds, and a sleep in the same unit. */
#ifndef HERD_CORE_CLOCK_H
#define HERD_CORE_CLOCK_H

#include <time.h>

static inline double herd_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps about s seconds (the kernel's timer slack added; a signal may end it early). */
static inline void herd_sleep(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

#endif
