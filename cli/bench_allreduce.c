/* herd bench allreduce: the nccl-tests table on herd's communicator. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/bench_tools.h"

static const char help[] =
    "usage: herd bench allreduce [options]        (under mpirun: one rank per process)\n"
    "\n"
    "Times in-place sums over all ranks for a sweep of sizes and checks every element\n"
    "of every result against the exact sum; exits 1 if any element is wrong.\n"
    "\n"
    "  -b, --minbytes SIZE     smallest size (default 8; K, M, G suffixes)\n"
    "  -e, --maxbytes SIZE     largest size (default 64M)\n"
    "  -f, --stepfactor N      size multiplier between rows (default 2)\n"
    "  -n, --iters N           timed reductions per size (default 20)\n"
    "  -w, --warmup_iters N    untimed reductions first (default 5)\n"
    "  -d, --datatype TYPE     float, half or bfloat16 (default float)\n"
    "      --backend NAME      mpi or nccl (default: mpi under mpirun, one process otherwise);\n"
    "                          nccl reduces GPU memory, local rank i on GPU i\n"
    "      --compare-mpi       also time MPI_Allreduce called directly on the same buffers\n"
    "      --fused-tensors K   K reductions of -b bytes (default 4K) each against one of\n"
    "                          the K tensors packed together: what tensor fusion buys\n"
    "  -J, --json FILE         also write the results as JSON\n"
    "\n"
    "Columns: time is the slowest rank's mean per reduction; algbw = size / time;\n"
    "busbw = algbw x 2(n-1)/n (the traffic each link carries in a ring allreduce, so it\n"
    "compares with the hardware's bandwidth whatever n); #wrong counts elements that\n"
    "differ from the exact sum, over all ranks.\n";

static void print_table(const bench_allreduce_config *cfg, const bench_allreduce_result *r)
{
    bool ref = cfg->compare_reference;
    printf("# herd bench allreduce: %d rank(s) on %d host(s), communicator %s, %s, %d iterations "
           "after %d warm-up\n",
           r->ranks, r->hosts, r->backend, bench_type_name(cfg->type), cfg->iters, cfg->warmup);
    if (r->ranks == 1)
        printf("# one rank: busbw = algbw x 2(n-1)/n is 0 by definition (nothing crosses a link);\n"
               "# algbw is the local cost of a reduction\n");
    printf("#\n# %12s %12s %9s %11s %12s %12s %8s", "size(B)", "count", "type", "time(us)",
           "algbw(GB/s)", "busbw(GB/s)", "#wrong");
    if (ref)
        printf("   %12s %12s %9s", "mpi_time(us)", "mpi_busbw", "herd/mpi");
    printf("\n");
    for (int i = 0; i < r->n_rows; i++) {
        const bench_allreduce_row *row = &r->rows[i];
        printf("  %12llu %12llu %9s %11.2f %12.3f %12.3f %8lld", (unsigned long long)row->bytes,
               (unsigned long long)row->count, bench_type_name(cfg->type), row->time_us,
               row->algbw_gbps, row->busbw_gbps, (long long)row->wrong);
        if (ref)
            printf("   %12.2f %12.3f %9.3f", row->ref_time_us, row->ref_busbw_gbps,
                   row->ref_time_us / row->time_us);
        printf("\n");
    }
    printf("# Avg bus bandwidth: %.3f GB/s", r->avg_busbw_gbps);
    if (ref && r->ref_avg_busbw_gbps > 0)
        printf(" (MPI_Allreduce: %.3f GB/s, herd/MPI %.3f)", r->ref_avg_busbw_gbps,
               r->avg_busbw_gbps / r->ref_avg_busbw_gbps);
    else if (ref)
        printf(" (MPI_Allreduce: %.3f GB/s)", r->ref_avg_busbw_gbps);
    printf("\n# #wrong: %lld element(s) differ from the exact sum\n", (long long)r->wrong);
}

static void print_fusion(const bench_allreduce_config *cfg, const bench_allreduce_result *r)
{
    unsigned long long tensor =
        bench_allreduce_count(cfg->type, cfg->min_bytes) * bench_type_size(cfg->type);
    int k = cfg->fused_tensors;
    printf("# herd bench allreduce --fused-tensors: %d rank(s) on %d host(s), communicator %s, "
           "%d tensors of %llu B (%s), %d steps after %d warm-up\n",
           r->ranks, r->hosts, r->backend, k, tensor, bench_type_name(cfg->type), cfg->iters,
           cfg->warmup);
    printf("  unfused: %d allreduces of %llu B   %12.2f us per step\n", k, tensor, r->unfused_us);
    printf("  fused:   1 allreduce of %llu B    %12.2f us per step\n", tensor * (unsigned long long)k,
           r->fused_us);
    printf("  speed-up from fusion: %.2fx\n", r->unfused_us / r->fused_us);
    printf("# #wrong: %lld element(s) differ from the exact sum\n", (long long)r->wrong);
}

int cmd_bench_allreduce(int argc, char **argv)
{
    static const struct option opts[] = {
        {"minbytes", required_argument, 0, 'b'},     {"maxbytes", required_argument, 0, 'e'},
        {"stepfactor", required_argument, 0, 'f'},   {"iters", required_argument, 0, 'n'},
        {"warmup_iters", required_argument, 0, 'w'}, {"datatype", required_argument, 0, 'd'},
        {"backend", required_argument, 0, 'B'},      {"compare-mpi", no_argument, 0, 'C'},
        {"fused-tensors", required_argument, 0, 'F'}, {"json", required_argument, 0, 'J'},
        {"help", no_argument, 0, 'h'},               {0, 0, 0, 0},
    };
    bench_allreduce_config cfg = {.min_bytes = 8, .max_bytes = 64 << 20, .factor = 2, .iters = 20,
                                  .warmup = 5, .type = BENCH_FLOAT};
    const char *backend = "auto", *json = NULL;
    bool min_given = false;
    long v;
    int opt;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "b:e:f:n:w:d:J:h", opts, NULL)) != -1) {
        int *dst = NULL;
        long lo = 1;
        switch (opt) {
        case 'b':
        case 'e':
            if (!herd_parse_size(optarg, 1, (uint64_t)1 << 34, opt == 'b' ? &cfg.min_bytes : &cfg.max_bytes))
                return cli_usage_error("bench allreduce", "expected a size from 1 to 16G, got '%s'", optarg);
            min_given |= opt == 'b';
            break;
        case 'f': dst = &cfg.factor; break;
        case 'n': dst = &cfg.iters; break;
        case 'w': dst = &cfg.warmup, lo = 0; break;
        case 'F': dst = &cfg.fused_tensors; break;
        case 'd':
            if (!bench_parse_type(optarg, &cfg.type))
                return cli_usage_error("bench allreduce", "unknown type '%s'; expected float, half or bfloat16", optarg);
            break;
        case 'B': backend = optarg; break;
        case 'C': cfg.compare_reference = true; break;
        case 'J': json = optarg; break;
        case 'h': fputs(help, stdout); return CLI_OK;
        default: return cli_usage_error("bench allreduce", "unknown or incomplete option");
        }
        if (dst && !herd_parse_long(optarg, lo, 1 << 20, &v))
            return cli_usage_error("bench allreduce", "expected an integer >= %ld, got '%s'", lo, optarg);
        if (dst)
            *dst = (int)v;
    }
    if (optind < argc)
        return cli_usage_error("bench allreduce", "unexpected argument '%s'", argv[optind]);
    if (cfg.fused_tensors > 0 && !min_given)
        cfg.min_bytes = 4096;
    if (cfg.fused_tensors == 0 && cfg.max_bytes < cfg.min_bytes)
        return cli_usage_error("bench allreduce", "the largest size (-e) is below the smallest (-b)");
    const char *corrupt = getenv("HERD_TEST_CORRUPT_ALLREDUCE");
    cfg.corrupt = corrupt && strcmp(corrupt, "1") == 0;

    bench_session *s = NULL;
    herd_status st = bench_session_open(backend, true, &s);
    if (st != HERD_OK)
        return cli_fail(st, "cannot create the communicator");
    bench_allreduce_result r;
    int rc = CLI_OK;
    if ((st = bench_allreduce(s, &cfg, &r)) != HERD_OK) {
        rc = cli_fail(st, "allreduce benchmark failed");
        if (bench_session_size(s) > 1) /* the other ranks would wait for this one forever */
            bench_session_abort(s, rc, "herd bench allreduce failed on this rank; stopping the job");
        bench_session_close(s);
        return rc;
    }
    bool rank0 = bench_session_rank(s) == 0;
    if (rank0) {
        if (cfg.fused_tensors > 0)
            print_fusion(&cfg, &r);
        else
            print_table(&cfg, &r);
        fflush(stdout);
        if (json && (st = bench_allreduce_write_json(&cfg, &r, json)) != HERD_OK)
            rc = cli_fail(st, "cannot write the JSON results");
    }
    if (r.wrong > 0) {
        if (rank0)
            fprintf(stderr, "herd: error: %lld element(s) of the reductions differ from the exact sum\n",
                    (long long)r.wrong);
        rc = CLI_FAIL;
    }
    bench_allreduce_result_free(&r);
    bench_session_close(s);
    return rc;
}
