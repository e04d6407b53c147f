/* herd predict: step time and scaling efficiency for 1..N workers from an alpha-beta
 * model of the gradient allreduce and one worker's measured (or given) step. */
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "tools/tools.h"

static const char predict_help[] =
    "usage: herd predict --model MODEL --workers N (--link-gbps X --latency-us Y | --from-bench FILE)\n"
    "                    [--step-ms T] [--threshold 0.9] [options]\n"
    "\n"
    "Predicts the step time and weak-scaling efficiency of 1..N data-parallel workers:\n"
    "one worker's step (measured here with a short 'herd bench train', or --step-ms) plus\n"
    "the allreduce of the model's gradients, modelled per message as latency alpha plus\n"
    "bytes x beta: ring 2(n-1)a + 2(n-1)/n B b, tree 2 ceil(log2 n)(a + B b); the faster\n"
    "counts. With overlap, communication hides behind backward: exposed = max(0, comm -\n"
    "backward). Prints the table and the largest N whose efficiency stays >= threshold.\n"
    "\n"
    "  --model MODEL       zoo name or model file (required)\n"
    "  --workers N         predict for 1..N workers (required)\n"
    "  --link-gbps X       link bandwidth in gigabits per second (beta = 8 / (X 1e9) s/byte)\n"
    "  --latency-us Y      per-message latency alpha in microseconds\n"
    "  --from-bench FILE   fit alpha and beta to 'herd bench allreduce -J FILE' results\n"
    "  --step-ms T         one worker's step time instead of measuring it\n"
    "  --backward-fraction F  share of the step that is backward (default: measured, or\n"
    "                      2/3 with --step-ms: backward costs about twice forward)\n"
    "  --compress fp16|bf16  gradients travel as 2 bytes instead of 4\n"
    "  --threshold E       efficiency to keep (default 0.9)\n"
    "  --data DATA         data for the model's shape and the measurement (fashion-mnist)\n"
    "  --batch-size N      per worker (128); --threads N (1); --steps N measured steps (20)\n"
    "  --json              one JSON object instead of the table\n";

typedef struct predict_args {
    const char *model, *data, *bench_file;
    long workers, batch, threads, steps;
    double link_gbps, latency_us, step_ms, backward_fraction, threshold;
    int grad_bytes_per_param;
    bool json;
} predict_args;

static int parse_args(int argc, char **argv, predict_args *a)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"workers", required_argument, 0, 'w'},
        {"link-gbps", required_argument, 0, 'g'}, {"latency-us", required_argument, 0, 'l'},
        {"from-bench", required_argument, 0, 'f'}, {"step-ms", required_argument, 0, 's'},
        {"backward-fraction", required_argument, 0, 'B'}, {"compress", required_argument, 0, 'c'},
        {"threshold", required_argument, 0, 't'}, {"data", required_argument, 0, 'd'},
        {"batch-size", required_argument, 0, 'b'}, {"threads", required_argument, 0, 'T'},
        {"steps", required_argument, 0, 'S'}, {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *a = (predict_args){.data = "fashion-mnist", .batch = 128, .threads = 1, .steps = 20,
                        .link_gbps = -1, .latency_us = -1, .step_ms = -1, .backward_fraction = -1,
                        .threshold = 0.9, .grad_bytes_per_param = 4};
    int opt, idx = 0;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        bool ok = true;
        switch (opt) {
        case 'm': a->model = optarg; break;
        case 'f': a->bench_file = optarg; break;
        case 'd': a->data = optarg; break;
        case 'j': a->json = true; break;
        case 'w': ok = cli_parse_int(optarg, 1, 1 << 20, &a->workers); break;
        case 'b': ok = cli_parse_int(optarg, 1, 1 << 20, &a->batch); break;
        case 'T': ok = cli_parse_int(optarg, 0, 1024, &a->threads); break;
        case 'S': ok = cli_parse_int(optarg, 1, 1 << 20, &a->steps); break;
        case 'g': ok = cli_parse_float(optarg, 1e-6, 1e9, &a->link_gbps); break;
        case 'l': ok = cli_parse_float(optarg, 0, 1e9, &a->latency_us); break;
        case 's': ok = cli_parse_float(optarg, 1e-6, 1e9, &a->step_ms); break;
        case 'B': ok = cli_parse_float(optarg, 0, 1, &a->backward_fraction); break;
        case 't': ok = cli_parse_float(optarg, 0, 1, &a->threshold); break;
        case 'c': {
            herd_compress wire = HERD_COMPRESS_NONE; /* "fp32" is accepted as "none" here */
            if (strcmp(optarg, "fp32") != 0 && herd_compress_parse(optarg, &wire) != HERD_OK)
                return cli_usage_error("predict", "--compress takes fp16, bf16 or none, got '%s'", optarg);
            a->grad_bytes_per_param = wire == HERD_COMPRESS_NONE ? 4 : 2;
            break;
        }
        case 'h': fputs(predict_help, stdout); return -1;
        default: return cli_usage_error("predict", "unknown or incomplete option");
        }
        if (!ok)
            return cli_usage_error("predict", "bad value '%s' for --%s", optarg, opts[idx].name);
    }
    if (optind < argc)
        return cli_usage_error("predict", "unexpected argument '%s'", argv[optind]);
    if (!a->model || !a->workers)
        return cli_usage_error("predict", "--model and --workers are required");
    bool given = a->link_gbps > 0 || a->latency_us >= 0;
    if (given == (a->bench_file != NULL) || (given && (a->link_gbps <= 0 || a->latency_us < 0)))
        return cli_usage_error("predict", "give the link either as --link-gbps X --latency-us Y "
                               "or as --from-bench FILE (herd bench allreduce -J FILE)");
    return CLI_OK;
}

static void print_table(const predict_args *a, const herd_predict_row *rows, int n_over, int n_plain)
{
    printf("%7s %9s %9s %9s %9s %6s %14s %6s\n", "workers", "ring_ms", "tree_ms", "comm_ms",
           "step_ms", "eff", "overlap_step_ms", "eff");
    for (int i = 0; i < a->workers; i++) {
        const herd_predict_row *r = &rows[i];
        printf("%7d %9.3f %9.3f %9.3f %9.3f %6.3f %14.3f %6.3f\n", r->workers, 1e3 * r->ring_s,
               1e3 * r->tree_s, 1e3 * r->comm_s, 1e3 * r->step_s, r->efficiency,
               1e3 * r->step_overlap_s, r->efficiency_overlap);
    }
    printf("largest worker count with efficiency >= %.2f (of 1..%ld): %d with overlap, %d without\n",
           a->threshold, a->workers, n_over, n_plain);
}

static void print_json(const predict_args *a, const herd_alpha_beta *ab, double grad_bytes,
                       double step_s, double backward_s, const herd_predict_row *rows, int n_over,
                       int n_plain)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddNumberToObject(o, "grad_bytes", grad_bytes);
    cJSON_AddNumberToObject(o, "step_ms", 1e3 * step_s);
    cJSON_AddNumberToObject(o, "backward_ms", 1e3 * backward_s);
    cJSON_AddBoolToObject(o, "step_measured", a->step_ms <= 0);
    cJSON_AddNumberToObject(o, "alpha_us", 1e6 * ab->alpha_s);
    cJSON_AddNumberToObject(o, "beta_ns_per_byte", 1e9 * ab->beta_s_per_byte);
    cJSON_AddNumberToObject(o, "threshold", a->threshold);
    cJSON_AddNumberToObject(o, "max_workers_overlap", n_over);
    cJSON_AddNumberToObject(o, "max_workers_no_overlap", n_plain);
    cJSON *list = cJSON_AddArrayToObject(o, "rows");
    for (int i = 0; i < a->workers; i++) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddNumberToObject(r, "workers", rows[i].workers);
        cJSON_AddNumberToObject(r, "ring_ms", 1e3 * rows[i].ring_s);
        cJSON_AddNumberToObject(r, "tree_ms", 1e3 * rows[i].tree_s);
        cJSON_AddNumberToObject(r, "comm_ms", 1e3 * rows[i].comm_s);
        cJSON_AddNumberToObject(r, "step_ms", 1e3 * rows[i].step_s);
        cJSON_AddNumberToObject(r, "efficiency", rows[i].efficiency);
        cJSON_AddNumberToObject(r, "step_overlap_ms", 1e3 * rows[i].step_overlap_s);
        cJSON_AddNumberToObject(r, "efficiency_overlap", rows[i].efficiency_overlap);
        cJSON_AddItemToArray(list, r);
    }
    cli_print_json(o);
}

int cmd_predict(int argc, char **argv)
{
    predict_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    herd_alpha_beta ab = {0};
    herd_status st;
    if (a.bench_file && (st = herd_alpha_beta_fit_file(a.bench_file, &ab)) != HERD_OK)
        return cli_fail(st, "cannot fit the link to the benchmark");
    if (!a.bench_file) {
        ab.alpha_s = a.latency_us * 1e-6;
        ab.beta_s_per_byte = 8.0 / (a.link_gbps * 1e9);
    }
    herd_dataset *ds = NULL;
    herd_model *m = NULL;
    herd_predict_row *rows = calloc((size_t)a.workers, sizeof *rows);
    if (!rows)
        return cli_fail(HERD_ERR_NOMEM, "out of memory");
    rc = CLI_FAIL;
    herd_bench_result r = {0};
    if ((st = herd_dataset_open(a.data, HERD_SPLIT_TRAIN, &ds)) != HERD_OK)
        cli_fail(st, "cannot open the data");
    else if ((st = herd_model_create(a.model, ds, &m)) != HERD_OK)
        cli_fail(st, "cannot build the model");
    else if (a.step_ms <= 0 && (st = herd_bench_train(m, ds, (int)a.batch, (int)a.steps, 3,
                                                      (int)a.threads, NULL, &r)) != HERD_OK)
        cli_fail(st, "cannot measure one worker's step");
    else {
        double grad_bytes = (double)herd_model_param_count(m) * a.grad_bytes_per_param;
        double step_s = a.step_ms > 0 ? a.step_ms * 1e-3 : r.step_s;
        double fraction = a.backward_fraction >= 0 ? a.backward_fraction
                          : a.step_ms > 0          ? 2.0 / 3.0
                                                   : r.phases.backward / r.step_s;
        double backward_s = fraction * step_s;
        if ((st = herd_predict_scaling(&ab, grad_bytes, step_s, backward_s, (int)a.workers, rows)) != HERD_OK) {
            cli_fail(st, "cannot predict");
        } else {
            int n_over = herd_predict_max_workers(rows, (int)a.workers, a.threshold, true);
            int n_plain = herd_predict_max_workers(rows, (int)a.workers, a.threshold, false);
            if (a.json) {
                print_json(&a, &ab, grad_bytes, step_s, backward_s, rows, n_over, n_plain);
            } else {
                printf("%s: %zu parameters, %.0f gradient bytes per step (%s)\n", herd_model_name(m),
                       herd_model_param_count(m), grad_bytes, a.grad_bytes_per_param == 2 ? "16-bit" : "fp32");
                if (a.bench_file)
                    printf("link: alpha %.2f us, beta %.4f ns/byte (%.2f Gbit/s), fitted to %d results "
                           "of %d ranks in %s (worst relative residual %.1f%%)\n", 1e6 * ab.alpha_s,
                           1e9 * ab.beta_s_per_byte, 8e-9 / ab.beta_s_per_byte, ab.points, ab.ranks,
                           a.bench_file, 100 * ab.max_rel_residual);
                else
                    printf("link: alpha %.2f us, beta %.4f ns/byte (%.2f Gbit/s), as given\n",
                           1e6 * ab.alpha_s, 1e9 * ab.beta_s_per_byte, a.link_gbps);
                if (a.step_ms > 0)
                    printf("one worker: step %.3f ms (given), backward %.3f ms (%s)\n", 1e3 * step_s,
                           1e3 * backward_s, a.backward_fraction >= 0 ? "given" : "assumed 2/3 of the step");
                else
                    printf("one worker: step %.3f ms, backward %.3f ms (measured here: %ld steps of "
                           "batch %ld, %ld thread(s))\n", 1e3 * step_s, 1e3 * backward_s, a.steps,
                           a.batch, a.threads);
                print_table(&a, rows, n_over, n_plain);
            }
            rc = CLI_OK;
        }
    }
    free(rows);
    herd_model_free(m);
    herd_dataset_free(ds);
    return rc;
}
