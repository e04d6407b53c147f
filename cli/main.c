/* herd command-line tool: dispatches to one file per subcommand. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
            "usage: herd <command> [options]\n"
            "\n"
            "Train neural networks data-parallel on CPU cores, GPUs and clusters (MPI, NCCL).\n"
            "\n"
            "commands:\n"
            "  train    train a model (herd train --help)\n"
            "  eval     evaluate a checkpoint on a dataset\n"
            "  bench    benchmarks: 'herd bench train' (throughput), 'bench allreduce', 'bench p2p'\n"
            "  models   list the model zoo with parameter counts and FLOPs\n"
            "  run      start a multi-process job through an MPI launcher: herd run -np 4 -- train ...\n"
            "  plot     PNG curves from a --metrics file, or step times from a --timeline trace\n"
            "  topo     this machine's cores, NUMA nodes, PCI devices, GPUs and their links\n"
            "  doctor   check the machine for what breaks or slows down training (pass/warn/fail)\n"
            "  predict  predict step time and scaling efficiency for 1..N workers\n"
            "\n"
            "  --version  print the version and the libraries this build uses\n"
            "  --help     this text\n");
}

static bool quiet_info;

void cli_quiet_info(bool quiet) { quiet_info = quiet; }

int main(int argc, char **argv)
{
    herd_set_log_fn(herd_log_to_stderr, &quiet_info);
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("%s\ncpu: oneDNN dispatches to %s\n", herd_build_info(), herd_cpu_isa());
        return CLI_OK;
    }
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return CLI_OK;
    }
    if (strcmp(cmd, "train") == 0)
        return cmd_train(argc - 1, argv + 1);
    if (strcmp(cmd, "eval") == 0)
        return cmd_eval(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0)
        return cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "models") == 0)
        return cmd_models(argc - 1, argv + 1);
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "plot") == 0)
        return cmd_plot(argc - 1, argv + 1);
    if (strcmp(cmd, "topo") == 0)
        return cmd_topo(argc - 1, argv + 1);
    if (strcmp(cmd, "doctor") == 0)
        return cmd_doctor(argc - 1, argv + 1);
    if (strcmp(cmd, "predict") == 0)
        return cmd_predict(argc - 1, argv + 1);
    fprintf(stderr, "herd: error: unknown command '%s'; run 'herd --help' for the list\n", cmd);
    return CLI_USAGE;
}
