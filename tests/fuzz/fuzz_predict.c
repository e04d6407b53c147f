/* herd predict's benchmark JSON (herd bench allreduce -J): accepted means >= 2 ranks,
 * 2..256 points with finite sizes >= 0 strictly increasing, finite positive times,
 * the last time above the first and a finite residual. */
#include <math.h>

#include "fuzz.h"
#include "tools/tools.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fz_strndup(data, size);
    herd_comm_link l;
    herd_status st = herd_comm_link_from_bench_json(text, &l);
    free(text);
    if (st != HERD_OK)
        return 0;
    FZ_CHECK(l.ranks >= 2, "ranks %d", l.ranks);
    FZ_CHECK(l.points >= 2 && l.points <= HERD_COMM_LINK_MAX_POINTS, "points %d", l.points);
    for (int i = 0; i < l.points; i++) {
        FZ_CHECK(isfinite(l.bytes[i]) && l.bytes[i] >= 0, "bytes[%d] %g", i, l.bytes[i]);
        FZ_CHECK(isfinite(l.time_s[i]) && l.time_s[i] > 0, "time_s[%d] %g", i, l.time_s[i]);
        FZ_CHECK(i == 0 || l.bytes[i] > l.bytes[i - 1], "bytes[%d] %g not above %g", i, l.bytes[i],
                 l.bytes[i - 1]);
    }
    FZ_CHECK(l.time_s[l.points - 1] > l.time_s[0], "time does not grow");
    FZ_CHECK(isfinite(l.max_rel_residual) && l.max_rel_residual >= 0, "residual %g", l.max_rel_residual);
    for (int n = 2; n <= 1024; n *= 4) {
        double t = herd_comm_link_allreduce_s(&l, n, l.bytes[l.points / 2] + 1);
        FZ_CHECK(isfinite(t) && t >= 0, "allreduce time %g at %d ranks", t, n);
    }
    return 0;
}
