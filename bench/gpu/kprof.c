/* Kernel-time breakdown of any CUDA program, for the GPU benchmarks (bench/gpu/speed.sh):
 * a CUDA injection library (CUDA_INJECTION64_PATH=kprof.so) that records every kernel's
 * GPU time through CUPTI's activity API and, at exit, writes one line per kernel name to
 * $KPROF_OUT: "calls<TAB>total_ns<TAB>demangled name". Two runs that differ only in their
 * step count give a step's kernels by difference (bench/gpu/kprof_diff.py), without
 * counting start-up work such as cuDNN's algorithm measurement.
 * Build (speed.sh does it where CUPTI is):
 *   gcc -O2 -shared -fPIC -I$CUDA/include bench/gpu/kprof.c -o kprof.so -L$CUPTI -lcupti -lstdc++ */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cupti.h>

char *__cxa_demangle(const char *mangled, char *out, size_t *len, int *status);

#define MAX_NAMES 8192
#define BUFFER_BYTES ((size_t)8 << 20)

typedef struct entry {
    char *name; /* mangled, owned */
    uint64_t calls, ns;
} entry;

static entry g_table[MAX_NAMES];
static int g_count;
static uint64_t g_dropped;

static entry *find(const char *name)
{
    /* Few distinct names (hundreds): a linear scan from the last hit is cheap enough
     * for a profiling run. */
    static int last;
    if (last < g_count && strcmp(g_table[last].name, name) == 0)
        return &g_table[last];
    for (int i = 0; i < g_count; i++)
        if (strcmp(g_table[i].name, name) == 0)
            return &g_table[last = i];
    if (g_count == MAX_NAMES)
        return NULL;
    g_table[g_count].name = strdup(name);
    return &g_table[last = g_count++];
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
            rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
            continue;
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
        entry *e = find(k->name ? k->name : "?");
        if (!e) {
            g_dropped++;
            continue;
        }
        e->calls++;
        e->ns += k->end - k->start;
    }
    free(buffer);
}

static void write_table(void)
{
    cuptiActivityFlushAll(1);
    const char *path = getenv("KPROF_OUT");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f)
        return;
    for (int i = 0; i < g_count; i++) {
        int status = -1;
        char *d = __cxa_demangle(g_table[i].name, NULL, NULL, &status);
        const char *shown = status == 0 && d ? d : g_table[i].name;
        /* Tabs and newlines cannot appear in a C++ name; the format stays one line each. */
        fprintf(f, "%llu\t%llu\t%s\n", (unsigned long long)g_table[i].calls,
                (unsigned long long)g_table[i].ns, shown);
        free(d);
    }
    if (g_dropped)
        fprintf(f, "%llu\t0\t(kernels of names beyond the table's %d)\n",
                (unsigned long long)g_dropped, MAX_NAMES);
    if (f != stderr)
        fclose(f);
}

/* Called by the CUDA driver when it initialises, because CUDA_INJECTION64_PATH names us. */
int InitializeInjection(void)
{
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) {
        fprintf(stderr, "kprof: CUPTI refused the activity callbacks\n");
        return 0;
    }
    atexit(write_table);
    return 1;
}
