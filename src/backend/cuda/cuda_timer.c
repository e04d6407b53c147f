/* The backend's phase timer: CUDA events recorded on the compute stream, in a ring of
 * HERD_TIMER_SLOTS made as they are first used. Timing events (cudaEventDefault):
 * cudaEventDisableTiming ones cannot be measured. */
#include "backend/cuda/cuda.h"

static cudaEvent_t g_marks[HERD_TIMER_SLOTS];

herd_status herd_cuda_timer_mark(int slot)
{
    HERD_TRY(herd_check_timer_slot(slot));
    if (!g_marks[slot])
        HERD_CUDA(cudaEventCreateWithFlags(&g_marks[slot], cudaEventDefault),
                  "creating a timing event");
    HERD_CUDA(cudaEventRecord(g_marks[slot], herd_cuda_ctx_get()->stream),
              "recording a timing event");
    return HERD_OK;
}

herd_status herd_cuda_timer_elapsed(int from, int to, double *seconds)
{
    HERD_TRY(herd_check_timer_slot(from));
    HERD_TRY(herd_check_timer_slot(to));
    if (!g_marks[from] || !g_marks[to])
        return HERD_ERR(HERD_ERR_INVALID_ARG, "timer slot %d has no mark yet",
                        g_marks[from] ? to : from);
    float ms = 0;
    HERD_CUDA(cudaEventSynchronize(g_marks[to]), "waiting for a timing event");
    HERD_CUDA(cudaEventElapsedTime(&ms, g_marks[from], g_marks[to]), "reading a timing event");
    *seconds = ms / 1e3;
    return HERD_OK;
}

void herd_cuda_timer_release(void)
{
    for (int i = 0; i < HERD_TIMER_SLOTS; i++)
        if (g_marks[i]) {
            cudaEventDestroy(g_marks[i]);
            g_marks[i] = NULL;
        }
}
