/* herd doctor: pass / warn / fail for everything that breaks or slows down training. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "tools/tools.h"

extern char **environ;

static const char doctor_help[] =
    "usage: herd doctor [--json] [--ranks-per-host N]\n"
    "\n"
    "Checks this machine for what breaks or slows down distributed training and prints\n"
    "pass, warn, fail or skip (could not check, or does not apply) for each, with the\n"
    "reason and the fix: IOMMU, PCIe ACS, /dev/shm size, locked-memory and stack limits,\n"
    "systemd RemoveIPC, NCCL/Open MPI settings that switch transports off, NVIDIA driver\n"
    "against herd's CUDA version, nvidia_uvm, GPUs per host, the MPI library and launcher,\n"
    "network interfaces, and GPU Xid errors in the kernel log. Needs no root.\n"
    "Under mpirun or srun, the first rank of each host prints (ranks per host from the\n"
    "launcher). Exit status: 0 when no check fails (warnings allowed), 1 when any fails.\n"
    "\n"
    "  --json              one JSON object instead of the table\n"
    "  --ranks-per-host N  compare GPUs with N ranks (default: the launcher's environment)\n"
    "  --root DIR          read /proc, /sys, /etc and /dev under DIR (for tests)\n";

int cmd_doctor(int argc, char **argv)
{
    static const struct option opts[] = {
        {"json", no_argument, 0, 'j'}, {"root", required_argument, 0, 'r'},
        {"ranks-per-host", required_argument, 0, 'n'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    herd_doctor_env env;
    herd_doctor_env_default(&env, environ);
    bool json = false;
    long ranks = 0;
    int opt;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'j': json = true; break;
        case 'r': env.root = optarg, env.probe_cma = NULL; break;
        case 'n':
            if (!herd_parse_long(optarg, 1, 1 << 16, &ranks))
                return cli_usage_error("doctor", "--ranks-per-host wants an integer >= 1, got '%s'", optarg);
            env.ranks_per_host = (int)ranks;
            break;
        case 'h': fputs(doctor_help, stdout); return CLI_OK;
        default: return cli_usage_error("doctor", "unknown or incomplete option");
        }
    }
    if (optind < argc)
        return cli_usage_error("doctor", "unexpected argument '%s'", argv[optind]);
    herd_check checks[HERD_DOCTOR_MAX_CHECKS];
    int n = herd_doctor_run(&env, checks);
    int count[4] = {0};
    for (int i = 0; i < n; i++)
        count[checks[i].status]++;
    /* Under a launcher every rank runs the checks; one per host prints them (every
     * rank's exit status still counts). */
    int local_rank, local_size;
    herd_doctor_local_ranks(&env, &local_rank, &local_size);
    bool print = local_rank == 0;
    if (print && json) {
        cJSON *o = cJSON_CreateObject(), *list = cJSON_AddArrayToObject(o, "checks");
        for (int i = 0; i < n; i++) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddStringToObject(c, "name", checks[i].name);
            cJSON_AddStringToObject(c, "status", herd_check_status_name(checks[i].status));
            cJSON_AddStringToObject(c, "detail", checks[i].detail);
            cJSON_AddStringToObject(c, "fix", checks[i].fix);
            cJSON_AddItemToArray(list, c);
        }
        cJSON_AddNumberToObject(o, "passed", count[HERD_CHECK_PASS]);
        cJSON_AddNumberToObject(o, "warnings", count[HERD_CHECK_WARN]);
        cJSON_AddNumberToObject(o, "failures", count[HERD_CHECK_FAIL]);
        cJSON_AddNumberToObject(o, "not_checked", count[HERD_CHECK_SKIP]);
        cli_print_json(o);
    } else if (print) {
        for (int i = 0; i < n; i++) {
            printf("%-4s  %-20s %s\n", herd_check_status_name(checks[i].status), checks[i].name,
                   checks[i].detail);
            if (checks[i].fix[0])
                printf("      %-20s fix: %s\n", "", checks[i].fix);
        }
        printf("%d passed, %d warning(s), %d failed, %d not checked\n", count[HERD_CHECK_PASS],
               count[HERD_CHECK_WARN], count[HERD_CHECK_FAIL], count[HERD_CHECK_SKIP]);
    }
    fflush(stdout);
    return count[HERD_CHECK_FAIL] ? CLI_FAIL : CLI_OK;
}
