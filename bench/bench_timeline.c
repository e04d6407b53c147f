/* What recording one --timeline event costs the training thread: a layer event as
 * model.c records it (two clock reads, a call through the trace sink and an append),
 * best of 10 runs of 100k events.
 * Multiplied by the events of a step (2 per layer + 7) it bounds the timeline's
 * overhead independently of machine noise.
 * Build: gcc -O2 -Iinclude -Isrc bench/bench_timeline.c build/libherd.a -ldnnl -lcjson -lz \
 *            -fopenmp -lm $(pkg-config --libs ompi-c 2>/dev/null) -o /tmp/bench_timeline */
#include <stdio.h>
#include <stdlib.h>

#include "core/clock.h"
#include "obs/timeline.h"

int main(void)
{
    enum { EVENTS = 100000 };
    herd_comm *c;
    herd_timeline *tl;
    /* Room for EVENTS (the buffer holds 64 steps): no growth inside a timed run. */
    if (herd_comm_local_create(&c) != HERD_OK ||
        herd_timeline_open("/dev/null", c, EVENTS / 64 + 1, &tl) != HERD_OK) {
        fprintf(stderr, "%s\n", herd_last_error());
        return 1;
    }
    const herd_trace_sink *sink = herd_timeline_sink(tl);
    double best = 1e9, clock_best = 1e9;
    for (int r = 0; r < 10; r++) {
        double t0 = herd_now();
        for (int i = 0; i < EVENTS; i++) {
            double a = herd_trace_start(sink);
            herd_trace_end(sink, HERD_TL_FWD_LAYER, "layer1.0.conv1", a);
        }
        double t = (herd_now() - t0) / EVENTS;
        best = t < best ? t : best;
        if (herd_timeline_flush(tl) != HERD_OK) /* empties the buffer: no growth inside */
            return 1;
        t0 = herd_now();
        volatile double clock_sum = 0;
        for (int i = 0; i < EVENTS; i++)
            clock_sum += herd_now();
        t = (herd_now() - t0) / EVENTS;
        clock_best = t < clock_best ? t : clock_best;
    }
    printf("layer event: %.1f ns (of which 2 clock reads: %.1f ns)\n", 1e9 * best, 2e9 * clock_best);
    herd_timeline_close(tl);
    herd_comm_destroy(c);
    return 0;
}
