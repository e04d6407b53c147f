/* The simulated device's phase timer: its ops run while the host waits, so host
 * clocks are its own; marks are herd_now() readings in a ring as on a GPU. */
#include "backend/sim/sim.h"
#include "core/clock.h"
#include "core/error.h"

static double g_marks[HERD_TIMER_SLOTS];
static bool g_marked[HERD_TIMER_SLOTS];

herd_status herd_sim_timer_mark(int slot)
{
    HERD_TRY(herd_check_timer_slot(slot));
    g_marks[slot] = herd_now();
    g_marked[slot] = true;
    return HERD_OK;
}

herd_status herd_sim_timer_elapsed(int from, int to, double *seconds)
{
    HERD_TRY(herd_check_timer_slot(from));
    HERD_TRY(herd_check_timer_slot(to));
    if (!g_marked[from] || !g_marked[to])
        return HERD_ERR(HERD_ERR_INVALID_ARG, "timer slot %d has no mark yet",
                        g_marked[from] ? to : from);
    *seconds = g_marks[to] - g_marks[from];
    return HERD_OK;
}
