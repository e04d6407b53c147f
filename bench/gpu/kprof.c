/* Kernel-time breakdown of any CUDA program, for the GPU benchmarks (bench/gpu/speed.sh):
 * a CUDA injection library (CUDA_INJECTION64_PATH=kprof.so) that records every kernel's
 * GPU time through CUPTI's activity API and, at exit, writes one line per kernel name to
 * $KPROF_OUT: "calls<TAB>total_ns<TAB>demangled name". Two runs that differ only in their
 * step count give a step's kernels by difference (bench/gpu/kprof_diff.py), without
 * counting start-up work such as cuDNN's algorithm measurement.
 * Where a step's wall time exceeds its kernel time, the same file says why, in rows whose
 * name starts with a tag: "api: NAME" (host time inside each CUDA runtime or driver call:
 * a synchronisation or a blocking copy shows here), "copy: KIND" (device copies and
 * sets) and "idle before: KERNEL" (the device doing nothing between the end of the work
 * before a kernel and its start: the host was late to launch it). With KPROF_API=1 it
 * also records the CUDA calls (which slows the host a little): "api: NAME", the host's time
 * inside each, and "host before: WHAT", the host's time outside CUDA calls before each
 * (WHAT is the kernel or copy the call launched, else the call's name): where the host
 * spends a step that the device waits for. With KPROF_SAMPLE=1 it samples the stack of the
 * thread that started CUDA every 250 us of wall time: "self: FUNCTION" (where it was) and
 * "in: FUNCTION" (on the stack), the executable's functions named from KPROF_SYMS (the
 * output of `nm -C --defined-only` on it), libraries' by their exported symbols.
 * Build (speed.sh does it where CUPTI is):
 *   gcc -O2 -shared -fPIC -I$CUDA/include bench/gpu/kprof.c -o kprof.so -L$CUPTI -lcupti -lstdc++ */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

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

/* Device work in order of completion: kernels and copies, for the idle gaps at exit. */
typedef struct span {
    uint64_t start, end;
    int name;      /* index into g_table */
    uint32_t corr; /* CUPTI's correlation id: device work to the call that launched it */
    int is_copy;
} span;
static span *g_spans, *g_calls; /* device work; host CUDA calls (KPROF_API=1) */
static size_t g_nspans, g_capspans, g_ncalls, g_capcalls;

static void push(span **a, size_t *n, size_t *cap, span s)
{
    if (*n == *cap) {
        size_t grown_cap = *cap ? 2 * *cap : 65536;
        span *grown = realloc(*a, grown_cap * sizeof *grown);
        if (!grown)
            return;
        *a = grown, *cap = grown_cap;
    }
    (*a)[(*n)++] = s;
}

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

enum { HOST_CALL, DEVICE_WORK };

static void add(const char *name, uint64_t start, uint64_t end, int where, uint32_t corr)
{
    entry *e = find(name);
    if (!e) {
        g_dropped++;
        return;
    }
    e->calls++;
    e->ns += end - start;
    span s = {start, end, (int)(e - g_table), corr, strncmp(name, "copy: ", 6) == 0};
    if (where == DEVICE_WORK)
        push(&g_spans, &g_nspans, &g_capspans, s);
    else
        push(&g_calls, &g_ncalls, &g_capcalls, s);
}

static void api_record(CUpti_CallbackDomain domain, const CUpti_ActivityAPI *a)
{
    const char *name = NULL;
    char buf[160];
    if (cuptiGetCallbackName(domain, a->cbid, &name) != CUPTI_SUCCESS || !name)
        name = "?";
    snprintf(buf, sizeof buf, "api: %s", name);
    add(buf, a->start, a->end, HOST_CALL, a->correlationId);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                      size_t size, size_t valid)
{
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *rec = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            add(k->name ? k->name : "?", k->start, k->end, DEVICE_WORK, k->correlationId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;
            static const char *kinds[] = {"?", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD",
                                          "DtoA", "DtoD", "HtoH", "PtoP"};
            char buf[64];
            snprintf(buf, sizeof buf, "copy: %s", m->copyKind < 11 ? kinds[m->copyKind] : "?");
            add(buf, m->start, m->end, DEVICE_WORK, m->correlationId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;
            add("copy: memset", m->start, m->end, DEVICE_WORK, m->correlationId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_RUNTIME: {
            api_record(CUPTI_CB_DOMAIN_RUNTIME_API, (const CUpti_ActivityAPI *)rec);
            break;
        }
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            api_record(CUPTI_CB_DOMAIN_DRIVER_API, (const CUpti_ActivityAPI *)rec);
            break;
        }
        default:
            break;
        }
    }
    free(buffer);
}

static int by_start(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

static int by_corr(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->corr < y->corr ? -1 : x->corr > y->corr;
}

static void add_gap(const char *tag, const char *what, uint64_t ns)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s%s", tag, what);
    entry *e = find(buf);
    if (e)
        e->calls++, e->ns += ns;
}

/* The device's idle time before each kernel: from the latest end of the work before it to
 * its start (one stream's work runs in order, so the gaps are the host's). */
static void add_idle_gaps(void)
{
    qsort(g_spans, g_nspans, sizeof *g_spans, by_start);
    uint64_t busy_until = 0;
    for (size_t i = 0; i < g_nspans; i++) {
        const span *s = &g_spans[i];
        if (busy_until && s->start > busy_until && !s->is_copy)
            add_gap("idle before: ", g_table[s->name].name, s->start - busy_until);
        if (s->end > busy_until)
            busy_until = s->end;
    }
}

/* The host's time between CUDA calls (nested driver calls inside a runtime call leave no
 * gap), named by the device work the next call launched. */
static void add_host_gaps(void)
{
    qsort(g_spans, g_nspans, sizeof *g_spans, by_corr);
    qsort(g_calls, g_ncalls, sizeof *g_calls, by_start);
    uint64_t busy_until = 0;
    for (size_t i = 0; i < g_ncalls; i++) {
        const span *c = &g_calls[i];
        if (busy_until && c->start > busy_until) {
            span key = {.corr = c->corr};
            const span *w = c->corr ? bsearch(&key, g_spans, g_nspans, sizeof key, by_corr) : NULL;
            add_gap("host before: ", g_table[w ? w->name : c->name].name, c->start - busy_until);
        }
        if (c->end > busy_until)
            busy_until = c->end;
    }
}

/* ---- KPROF_SAMPLE=1: a wall-clock sampler of the CUDA thread's stack */

#define SAMPLE_DEPTH 40
#define SAMPLE_CAP 65536
#define SAMPLE_NS 250000

typedef struct sym {
    uintptr_t addr;
    char *name;
} sym;

static void *(*g_frames)[SAMPLE_DEPTH];
static int *g_depths;
static volatile size_t g_nsamples;
static timer_t g_timer;
static int g_sampling;
static sym *g_syms;
static size_t g_nsyms;

static void on_sample(int sig)
{
    (void)sig;
    size_t i = g_nsamples;
    if (i < SAMPLE_CAP) {
        g_depths[i] = backtrace(g_frames[i], SAMPLE_DEPTH);
        g_nsamples = i + 1;
    }
}

static int by_addr(const void *a, const void *b)
{
    const sym *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void load_syms(const char *path)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return;
    char line[4096], name[4096];
    unsigned long addr;
    char type;
    size_t cap = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx %c %4095[^\n]", &addr, &type, name) != 3 ||
            !strchr("TtWw", type))
            continue;
        if (g_nsyms == cap) {
            cap = cap ? 2 * cap : 4096;
            sym *grown = realloc(g_syms, cap * sizeof *grown);
            if (!grown)
                break;
            g_syms = grown;
        }
        g_syms[g_nsyms++] = (sym){addr, strdup(name)};
    }
    fclose(f);
    qsort(g_syms, g_nsyms, sizeof *g_syms, by_addr);
}

static void start_sampling(void)
{
    g_frames = calloc(SAMPLE_CAP, sizeof *g_frames);
    g_depths = calloc(SAMPLE_CAP, sizeof *g_depths);
    if (!g_frames || !g_depths)
        return;
    void *warm[4];
    backtrace(warm, 4); /* loads the unwinder now, not inside the signal handler */
    load_syms(getenv("KPROF_SYMS"));
    struct sigaction sa = {.sa_handler = on_sample, .sa_flags = SA_RESTART};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGPROF, &sa, NULL);
    struct sigevent ev = {.sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGPROF};
    ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    struct itimerspec period = {{0, SAMPLE_NS}, {0, SAMPLE_NS}};
    if (timer_create(CLOCK_MONOTONIC, &ev, &g_timer) == 0 &&
        timer_settime(g_timer, 0, &period, NULL) == 0)
        g_sampling = 1;
}

/* "function" for a frame in the executable, "library!symbol" elsewhere. */
static void frame_label(void *pc, char *out, size_t cap)
{
    Dl_info info;
    if (!dladdr(pc, &info) || !info.dli_fname) {
        snprintf(out, cap, "?");
        return;
    }
    const char *obj = strrchr(info.dli_fname, '/');
    obj = obj ? obj + 1 : info.dli_fname;
    uintptr_t off = (uintptr_t)pc - (uintptr_t)info.dli_fbase;
    if (g_nsyms && strncmp(obj, "lib", 3) != 0) {
        size_t lo = 0, hi = g_nsyms;
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (g_syms[mid].addr <= off)
                lo = mid;
            else
                hi = mid;
        }
        if (g_syms[lo].addr <= off) {
            snprintf(out, cap, "%s", g_syms[lo].name);
            return;
        }
    }
    snprintf(out, cap, "%s!%s", obj, info.dli_sname ? info.dli_sname : "?");
}

static void add_samples(void)
{
    if (!g_sampling)
        return;
    struct itimerspec off = {{0, 0}, {0, 0}};
    timer_settime(g_timer, 0, &off, NULL);
    size_t n = g_nsamples;
    static char labels[SAMPLE_DEPTH][512];
    char buf[600];
    for (size_t i = 0; i < n; i++) {
        int used = 0;
        /* Frames 0 and 1 are the handler and the signal's return trampoline. */
        for (int f = 2; f < g_depths[i]; f++) {
            char label[512];
            frame_label(g_frames[i][f], label, sizeof label);
            if (f == 2) {
                snprintf(buf, sizeof buf, "self: %s", label);
                entry *e = find(buf);
                if (e)
                    e->calls++, e->ns += SAMPLE_NS;
            }
            int seen = 0;
            for (int j = 0; j < used && !seen; j++)
                seen = strcmp(labels[j], label) == 0;
            if (seen)
                continue;
            snprintf(labels[used++], sizeof labels[0], "%s", label);
            snprintf(buf, sizeof buf, "in: %s", label);
            entry *e = find(buf);
            if (e)
                e->calls++, e->ns += SAMPLE_NS;
        }
    }
}

static void write_table(void)
{
    add_samples();
    cuptiActivityFlushAll(1);
    add_idle_gaps();
    add_host_gaps();
    const char *path = getenv("KPROF_OUT");
    FILE *f = path ? fopen(path, "w") : stderr;
    if (!f)
        return;
    for (int i = 0; i < g_count; i++) {
        const char *name = g_table[i].name, *tag = "";
        int whole = strncmp(name, "self: ", 6) == 0 || strncmp(name, "in: ", 4) == 0;
        if (whole) /* already readable */
            ;
        else if (strncmp(name, "idle before: ", 13) == 0)
            tag = "idle before: ", name += 13;
        else if (strncmp(name, "host before: ", 13) == 0)
            tag = "host before: ", name += 13;
        int status = -1;
        char *d = whole ? NULL : __cxa_demangle(name, NULL, NULL, &status);
        const char *shown = status == 0 && d ? d : name;
        /* Tabs and newlines cannot appear in a C++ name; the format stays one line each. */
        fprintf(f, "%llu\t%llu\t%s%s\n", (unsigned long long)g_table[i].calls,
                (unsigned long long)g_table[i].ns, tag, shown);
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
    const char *api_env = getenv("KPROF_API");
    int api = api_env && strcmp(api_env, "1") == 0;
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) != CUPTI_SUCCESS ||
        (api && (cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME) != CUPTI_SUCCESS ||
                 cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER) != CUPTI_SUCCESS))) {
        fprintf(stderr, "kprof: CUPTI refused the activity callbacks\n");
        return 0;
    }
    atexit(write_table);
    const char *sample = getenv("KPROF_SAMPLE");
    if (sample && strcmp(sample, "1") == 0)
        start_sampling();
    return 1;
}
