/* herd bench p2p: bandwidth and latency matrices between ranks, and between GPUs. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/bench_tools.h"

static const char help[] =
    "usage: herd bench p2p [options]        (under mpirun: one rank per process)\n"
    "\n"
    "Measures every pair of ranks in turn through herd's communicator (MPI), then the\n"
    "GPUs that rank 0 sees through cudaMemcpyPeer with peer access enabled and disabled,\n"
    "and prints N x N matrices (row: source, column: destination):\n"
    "  unidirectional bandwidth  one side streams messages to the other (GB/s)\n"
    "  bidirectional bandwidth   both stream at once; the two directions added (GB/s)\n"
    "  latency                   ranks: half a ping-pong round trip; GPUs: time per small\n"
    "                            copy, copies queued back to back (us)\n"
    "\n"
    "  -b, --bytes SIZE       bandwidth message size (default 4M; K, M, G suffixes)\n"
    "  -n, --iters N          messages per bandwidth measurement (default 20)\n"
    "      --lat-bytes SIZE   latency message size (default 8)\n"
    "      --lat-iters N      round trips (copies for GPUs) per latency figure (default 200)\n"
    "      --backend NAME     mpi or local (default: mpi under mpirun, one process otherwise);\n"
    "                         GPUs are measured with cudaMemcpyPeer whatever the backend\n";

static void print_matrix(const char *title, const char *who, const double *m, int n, int decimals)
{
    printf("\n%s\n%8s", title, who);
    for (int j = 0; j < n; j++)
        printf(" %9d", j);
    printf("\n");
    for (int i = 0; i < n; i++) {
        printf("%8d", i);
        for (int j = 0; j < n; j++) {
            if (isnan(m[i * n + j]))
                printf(" %9s", "-");
            else
                printf(" %9.*f", decimals, m[i * n + j]);
        }
        printf("\n");
    }
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The pair a cluster's operator looks for: the lowest bandwidth against the median. */
static void print_slowest(const bench_p2p_matrices *m)
{
    int n = m->n, pairs = 0, slow = -1;
    double *sorted = malloc((size_t)n * (size_t)n * sizeof *sorted);
    if (!sorted || n < 2) {
        free(sorted);
        return;
    }
    for (int k = 0; k < n * n; k++) {
        if (isnan(m->uni_gbps[k]))
            continue;
        sorted[pairs++] = m->uni_gbps[k];
        if (slow < 0 || m->uni_gbps[k] < m->uni_gbps[slow])
            slow = k;
    }
    qsort(sorted, (size_t)pairs, sizeof *sorted, compare_doubles);
    double median = sorted[pairs / 2];
    printf("\n# slowest pair: rank %d -> rank %d at %.3f GB/s, %.0f%% of the median pair (%.3f GB/s)\n",
           slow / n, slow % n, m->uni_gbps[slow], 100.0 * m->uni_gbps[slow] / median, median);
    free(sorted);
}

static int print_hosts(bench_session *s)
{
    bench_host *hosts = NULL;
    herd_status st = bench_session_hosts(s, &hosts);
    if (st != HERD_OK)
        return cli_fail(st, "cannot list the hosts");
    for (int r = 0; bench_session_rank(s) == 0 && r < bench_session_size(s); r++)
        printf("#   rank %d: %s\n", r, hosts[r].name);
    free(hosts);
    return CLI_OK;
}

static int gpu_matrices(const bench_p2p_config *cfg, const char *host)
{
    int n = 0;
    char why[160] = "";
    herd_status st = bench_p2p_gpu_count(&n, why, sizeof why);
    if (st == HERD_ERR_UNSUPPORTED || n == 0) {
        printf("\nGPUs (rank 0, host %s): skipped: no GPU (%s)\n", host, why);
        return CLI_OK;
    }
    if (st != HERD_OK)
        return cli_fail(st, "cannot count the GPUs");
    printf("\nGPUs (rank 0, host %s): %d visible\n\nPeer access (1: direct, 0: staged through the host)\n%8s",
           host, n, "GPU");
    for (int j = 0; j < n; j++)
        printf(" %9d", j);
    for (int i = 0; i < n; i++) {
        printf("\n%8d", i);
        for (int j = 0; j < n; j++) {
            bool yes = false;
            if ((st = bench_p2p_gpu_can_access(i, j, &yes)) != HERD_OK)
                return cli_fail(st, "cannot query peer access");
            printf(" %9d", yes);
        }
    }
    printf("\n");
    for (int peer = 0; peer < 2; peer++) {
        bench_p2p_matrices m;
        if ((st = bench_p2p_gpus(cfg, peer, &m)) != HERD_OK)
            return cli_fail(st, "GPU peer-to-peer benchmark failed");
        char title[128];
        const char *p = peer ? "P2P enabled" : "P2P disabled";
        snprintf(title, sizeof title, "Unidirectional bandwidth, %s (GB/s)", p);
        print_matrix(title, "GPU", m.uni_gbps, n, 2);
        snprintf(title, sizeof title, "Bidirectional bandwidth, %s (GB/s)", p);
        print_matrix(title, "GPU", m.bi_gbps, n, 2);
        snprintf(title, sizeof title, "Latency, %s (us)", p);
        print_matrix(title, "GPU", m.lat_us, n, 2);
        bench_p2p_matrices_free(&m);
    }
    return CLI_OK;
}

int cmd_bench_p2p(int argc, char **argv)
{
    static const struct option opts[] = {
        {"bytes", required_argument, 0, 'b'},     {"iters", required_argument, 0, 'n'},
        {"lat-bytes", required_argument, 0, 'L'}, {"lat-iters", required_argument, 0, 'l'},
        {"backend", required_argument, 0, 'B'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    bench_p2p_config cfg = {.bw_bytes = 4 << 20, .bw_reps = 20, .lat_bytes = 8, .lat_reps = 200};
    const char *backend = "auto";
    uint64_t size;
    long v;
    int opt;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "b:n:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'b':
        case 'L':
            if (!herd_parse_size(optarg, 1, 1u << 30, &size))
                return cli_usage_error("bench p2p", "expected a size from 1 to 1G, got '%s'", optarg);
            *(opt == 'b' ? &cfg.bw_bytes : &cfg.lat_bytes) = (size_t)size;
            break;
        case 'n':
        case 'l':
            if (!herd_parse_long(optarg, 1, 1 << 24, &v))
                return cli_usage_error("bench p2p", "expected a positive integer, got '%s'", optarg);
            *(opt == 'n' ? &cfg.bw_reps : &cfg.lat_reps) = (int)v;
            break;
        case 'B': backend = optarg; break;
        case 'h': fputs(help, stdout); return CLI_OK;
        default: return cli_usage_error("bench p2p", "unknown or incomplete option");
        }
    }
    if (optind < argc)
        return cli_usage_error("bench p2p", "unexpected argument '%s'", argv[optind]);

    bench_session *s = NULL;
    herd_status st = bench_session_open(backend, false, &s);
    if (st != HERD_OK)
        return cli_fail(st, "cannot create the communicator");
    bench_p2p_matrices m;
    int rc = CLI_OK;
    bool rank0 = bench_session_rank(s) == 0;
    int ranks = bench_session_size(s);
    if (rank0)
        printf("# herd bench p2p: %d rank(s), communicator %s; bandwidth: %d messages of %zu B, "
               "latency: %d round trips of %zu B\n",
               ranks, bench_session_backend(s), cfg.bw_reps, cfg.bw_bytes, cfg.lat_reps,
               cfg.lat_bytes);
    if ((rc = print_hosts(s)) == CLI_OK && (st = bench_p2p_ranks(s, &cfg, &m)) != HERD_OK)
        rc = cli_fail(st, "peer-to-peer benchmark between ranks failed");
    if (rc != CLI_OK) {
        if (ranks > 1) /* the other ranks would wait for this one forever */
            bench_session_abort(s, rc, "herd bench p2p failed on this rank; stopping the job");
        bench_session_close(s);
        return rc;
    }
    if (rank0) {
        if (ranks == 1)
            printf("\n# one rank: no pair of ranks to measure (run under mpirun -np N)\n");
        print_matrix("Unidirectional bandwidth between ranks (GB/s)", "rank", m.uni_gbps, m.n, 3);
        print_matrix("Bidirectional bandwidth between ranks (GB/s)", "rank", m.bi_gbps, m.n, 3);
        print_matrix("Latency between ranks (us)", "rank", m.lat_us, m.n, 2);
        print_slowest(&m);
        rc = gpu_matrices(&cfg, bench_session_host(s));
        fflush(stdout);
    }
    bench_p2p_matrices_free(&m);
    bench_session_close(s);
    return rc;
}
