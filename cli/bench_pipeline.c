/* herd bench pipeline: the bubble of a pipeline schedule with synthetic stages. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "tools/bench_tools.h"

static const char help[] =
    "usage: herd bench pipeline [options]   (under herd run -np P: one stage per rank)\n"
    "\n"
    "Runs P synthetic pipeline stages through the schedule herd train uses: a\n"
    "micro-batch's forward costs --stage-ms on every stage, its backward --backward-ratio\n"
    "times that, and stages pass --bytes of activations and gradients over MPI. Sleeping\n"
    "stages (the default) make more ranks than cores meaningful. Prints each stage's busy\n"
    "time and bubble, and the measured bubble next to the ideal (P-1)/(M+P-1).\n"
    "\n"
    "  -m, --micro-batches M    micro-batches per step (8)\n"
    "  -t, --stage-ms T         forward time of a stage per micro-batch, ms (10)\n"
    "      --backward-ratio R   backward time / forward time (2)\n"
    "      --schedule S         1f1b or gpipe (1f1b)\n"
    "  -n, --steps N            timed steps (5), after --warmup W untimed ones (1)\n"
    "  -b, --bytes SIZE         activation and gradient message size (64K)\n"
    "      --spin               busy-wait instead of sleeping (needs a core per rank)\n"
    "\n"
    "The last line is key=value: stages, micro_batches, schedule, stage_ms, step_ms,\n"
    "ideal_step_ms, measured_bubble, ideal_bubble.\n";

int cmd_bench_pipeline(int argc, char **argv)
{
    static const struct option opts[] = {
        {"micro-batches", required_argument, 0, 'm'}, {"stage-ms", required_argument, 0, 't'},
        {"backward-ratio", required_argument, 0, 'r'}, {"schedule", required_argument, 0, 's'},
        {"steps", required_argument, 0, 'n'},         {"warmup", required_argument, 0, 'w'},
        {"bytes", required_argument, 0, 'b'},         {"spin", no_argument, 0, 'S'},
        {"help", no_argument, 0, 'h'},                {0, 0, 0, 0},
    };
    bench_pipeline_config cfg = {.micro_batches = 8, .stage_ms = 10, .backward_ratio = 2,
                                 .steps = 5, .warmup = 1, .bytes = 64 << 10};
    long v;
    double d;
    uint64_t size;
    int opt;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "m:t:n:b:h", opts, NULL)) != -1) {
        switch (opt) {
        case 'm':
        case 'n':
        case 'w':
            if (!herd_parse_long(optarg, opt == 'w' ? 0 : 1, 1 << 20, &v))
                return cli_usage_error("bench pipeline", "expected a %s integer, got '%s'",
                                       opt == 'w' ? "non-negative" : "positive", optarg);
            *(opt == 'm' ? &cfg.micro_batches : opt == 'n' ? &cfg.steps : &cfg.warmup) = (int)v;
            break;
        case 't':
        case 'r':
            if (!herd_parse_double(optarg, 1e-3, 1e6, &d))
                return cli_usage_error("bench pipeline", "expected a positive number, got '%s'", optarg);
            *(opt == 't' ? &cfg.stage_ms : &cfg.backward_ratio) = d;
            break;
        case 's':
            if (!cli_pp_schedule_arg("bench pipeline", "--schedule", optarg, &cfg.schedule))
                return CLI_USAGE;
            break;
        case 'b':
            if (!herd_parse_size(optarg, 1, 1u << 30, &size))
                return cli_usage_error("bench pipeline", "expected a size from 1 to 1G, got '%s'", optarg);
            cfg.bytes = (size_t)size;
            break;
        case 'S': cfg.spin = true; break;
        case 'h': fputs(help, stdout); return CLI_OK;
        default: return cli_usage_error("bench pipeline", "unknown or incomplete option");
        }
    }
    if (optind < argc)
        return cli_usage_error("bench pipeline", "unexpected argument '%s'", argv[optind]);
    bench_session *s = NULL;
    herd_status st = bench_session_open("auto", false, &s);
    if (st != HERD_OK)
        return cli_fail(st, "cannot create the communicator");
    bench_pipeline_result r;
    int ranks = bench_session_size(s);
    if ((st = bench_pipeline(s, &cfg, &r)) != HERD_OK) {
        int rc = cli_fail(st, "the pipeline benchmark failed");
        if (ranks > 1)
            bench_session_abort(s, rc, "herd bench pipeline failed on this rank; stopping the job");
        bench_session_close(s);
        return rc;
    }
    const char *sched = herd_pp_schedule_name(cfg.schedule);
    if (bench_session_rank(s) == 0) {
        printf("# herd bench pipeline: %d stages, %d micro-batches, %s, forward %.3g ms and backward "
               "%.3g ms per micro-batch and stage (%s), %zu B messages, %d timed steps\n",
               r.stages, cfg.micro_batches, sched, cfg.stage_ms, cfg.stage_ms * cfg.backward_ratio,
               cfg.spin ? "spun" : "slept", cfg.bytes, cfg.steps);
        printf("%6s %12s %12s %8s\n", "stage", "busy_ms", "step_ms", "bubble");
        for (int i = 0; i < r.stages; i++)
            printf("%6d %12.2f %12.2f %8.3f\n", i, r.busy_ms[i], r.step_ms, r.bubble[i]);
        printf("stages=%d micro_batches=%d schedule=%s stage_ms=%g step_ms=%.2f ideal_step_ms=%.2f "
               "measured_bubble=%.4f ideal_bubble=%.4f\n",
               r.stages, cfg.micro_batches, sched, cfg.stage_ms, r.step_ms, r.ideal_step_ms,
               r.measured_bubble, r.ideal_bubble);
        fflush(stdout);
    }
    bench_session_close(s);
    return CLI_OK;
}
