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
    HERD_TRY(herd_sim_graph_refuse("timer_mark", "a mark inside a graph cannot be timed"));
    g_marks[slot] = herd_now();
    g_marked[slot] = true;
    return HERD_OK;
}

static herd_status check_marked(int slot)
{
    HERD_TRY(herd_check_timer_slot(slot));
    if (!g_marked[slot])
        return HERD_ERR(HERD_ERR_INVALID_ARG, "timer slot %d has no mark yet", slot);
    return HERD_OK;
}

herd_status herd_sim_timer_host_time(int slot, double *host_seconds)
{
    HERD_TRY(check_marked(slot));
    *host_seconds = g_marks[slot];
    return HERD_OK;
}

herd_status herd_sim_timer_elapsed(int from, int to, double *seconds)
{
    HERD_TRY(check_marked(from));
    HERD_TRY(check_marked(to));
    *seconds = g_marks[to] - g_marks[from];
    return HERD_OK;
}
