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
    "every collective of the step. Each gradient bucket (as herd train plans them) is\n"
    "reduced once backward has produced it (backward split over the layers by FLOPs),\n"
    "one after another on the communication thread; the step waits for the last. An\n"
    "allreduce of B bytes takes the --from-bench table's time (straight lines between\n"
    "measured sizes) or latency alpha plus bytes x beta: ring 2(n-1)a + 2(n-1)/n B b,\n"
    "tree 2 ceil(log2 n)(a + B b), the faster. Prints the table and the largest N whose\n"
    "efficiency stays >= threshold.\n"
    "\n"
    "  --model MODEL       zoo name or model file (required)\n"
    "  --workers N         predict for 1..N workers (required)\n"
    "  --link-gbps X       link bandwidth in gigabits per second (beta = 8 / (X 1e9) s/byte)\n"
    "  --latency-us Y      per-message latency alpha in microseconds\n"
    "  --from-bench FILE   the allreduce times of 'herd bench allreduce -J FILE'\n"
    "  --step-ms T         one worker's step time instead of measuring it\n"
    "  --backward-fraction F  share of the step that is backward (default: measured, or\n"
    "                      2/3 with --step-ms: backward costs about twice forward)\n"
    "  --compress fp16|bf16  gradients travel as 2 bytes instead of 4\n"
    "  --bucket-mb X       gradient bucket size as for herd train (25; the first 1 MiB)\n"
    "  --sync-bn           batch norms exchange statistics (3 blocking reductions each)\n"
    "  --metrics-exchange step-late|last-bucket|blocking  how the step's loss and accuracy\n"
    "                      travel (step-late, the default, as herd train does: their own\n"
    "                      reduction queued at the step's end, ahead of the next step's\n"
    "                      buckets; last-bucket: inside the last bucket; blocking: herd\n"
    "                      before 2026-11, a round trip after the update)\n"
    "  --threshold E       efficiency to keep (default 0.9)\n"
    "  --data DATA         data for the model's shape and the measurement (fashion-mnist)\n"
    "  --seq-len T         token data: tokens per sample (the model's context)\n"
    "  --batch-size N      per worker (128); --threads N (1); --steps N measured steps (20)\n"
    "  --pipeline-stages P  also predict one pipeline of P stages (herd train\n"
    "                      --pipeline-stages): the layers split as herd splits them (by\n"
    "                      FLOP shares of the measured step), the schedule simulated stage by\n"
    "                      stage, each boundary's activations and gradients one message each\n"
    "                      way (alpha + bytes x beta of the link's segment)\n"
    "  --micro-batches M   micro-batches of --batch-size / M (--pipeline-stages; 4)\n"
    "  --tensor-parallel T  also predict one replica split over T ranks (herd train\n"
    "                      --tensor-parallel): each layer's share of the step scaled by its\n"
    "                      part's FLOPs, and every sum of the tensor group blocking, an\n"
    "                      all-gather of T - 1 messages of the summed bytes over the link\n"
    "  --pp-schedule S     1f1b or gpipe (1f1b)\n"
    "  --json              one JSON object instead of the table\n";

static const char *const metrics_names[] = {"last-bucket", "step-late", "blocking"};

typedef struct predict_args {
    const char *model, *data, *bench_file;
    long workers, batch, threads, steps;
    double link_gbps, latency_us, step_ms, backward_fraction, threshold, bucket_mb;
    int grad_bytes_per_param;
    herd_metrics_exchange metrics;
    bool json, sync_bn;
    long stages, micro_batches, tensor_parallel, seq_len;
    herd_pp_schedule_kind schedule;
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
        {"bucket-mb", required_argument, 0, 'K'}, {"sync-bn", no_argument, 0, 'Y'},
        {"metrics-exchange", required_argument, 0, 'M'},
        {"pipeline-stages", required_argument, 0, 'P'}, {"micro-batches", required_argument, 0, 'U'},
        {"tensor-parallel", required_argument, 0, 'X'}, {"seq-len", required_argument, 0, 'q'},
        {"pp-schedule", required_argument, 0, 'Q'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    *a = (predict_args){.data = "fashion-mnist", .batch = 128, .threads = 1, .steps = 20,
                        .link_gbps = -1, .latency_us = -1, .step_ms = -1, .backward_fraction = -1,
                        .threshold = 0.9, .metrics = HERD_METRICS_STEP_LATE, .grad_bytes_per_param = 4, .bucket_mb = 25,
                        .stages = 1, .micro_batches = 4, .tensor_parallel = 1};
    int opt, idx = 0;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "", opts, &idx)) != -1) {
        bool ok = true;
        switch (opt) {
        case 'm': a->model = optarg; break;
        case 'f': a->bench_file = optarg; break;
        case 'd': a->data = optarg; break;
        case 'j': a->json = true; break;
        case 'w': ok = herd_parse_long(optarg, 1, 1 << 20, &a->workers); break;
        case 'b': ok = herd_parse_long(optarg, 1, 1 << 20, &a->batch); break;
        case 'T': ok = herd_parse_long(optarg, 0, 1024, &a->threads); break;
        case 'S': ok = herd_parse_long(optarg, 1, 1 << 20, &a->steps); break;
        case 'g': ok = herd_parse_double(optarg, 1e-6, 1e9, &a->link_gbps); break;
        case 'l': ok = herd_parse_double(optarg, 0, 1e9, &a->latency_us); break;
        case 's': ok = herd_parse_double(optarg, 1e-6, 1e9, &a->step_ms); break;
        case 'B': ok = herd_parse_double(optarg, 0, 1, &a->backward_fraction); break;
        case 't': ok = herd_parse_double(optarg, 0, 1, &a->threshold); break;
        case 'K': ok = herd_parse_double(optarg, 1e-6, 1e6, &a->bucket_mb); break;
        case 'Y': a->sync_bn = true; break;
        case 'P': ok = herd_parse_long(optarg, 1, HERD_PREDICT_MAX_STAGES, &a->stages); break;
        case 'X': ok = herd_parse_long(optarg, 1, 64, &a->tensor_parallel); break;
        case 'q': ok = herd_parse_long(optarg, 1, 1 << 24, &a->seq_len); break;
        case 'U': ok = herd_parse_long(optarg, 1, 1 << 20, &a->micro_batches); break;
        case 'Q':
            if (!cli_pp_schedule_arg("predict", "--pp-schedule", optarg, &a->schedule))
                return CLI_USAGE;
            break;
        case 'M': {
            int i = 0;
            while (i < 3 && strcmp(optarg, metrics_names[i]) != 0)
                i++;
            if (i == 3)
                return cli_usage_error("predict", "--metrics-exchange takes last-bucket, step-late "
                                       "or blocking, got '%s'", optarg);
            a->metrics = (herd_metrics_exchange)i;
            break;
        }
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
    if (a->stages > 1 && a->batch % a->micro_batches != 0)
        return cli_usage_error("predict", "--batch-size %ld does not divide into --micro-batches %ld",
                               a->batch, a->micro_batches);
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

static cJSON *summary_json(const predict_args *a, const herd_comm_link *link, const herd_predict_plan *p,
                       const herd_predict_row *rows, int n_over, int n_plain)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", a->model);
    cJSON_AddNumberToObject(o, "grad_bytes", p->grad_bytes);
    cJSON_AddNumberToObject(o, "step_ms", 1e3 * p->step_s);
    cJSON_AddNumberToObject(o, "forward_ms", 1e3 * p->sm.forward_s);
    cJSON_AddNumberToObject(o, "backward_ms", 1e3 * p->backward_total_s);
    cJSON_AddBoolToObject(o, "step_measured", a->step_ms <= 0);
    bool beyond;
    herd_alpha_beta ab = herd_comm_link_segment(link, p->grad_bytes, &beyond);
    cJSON_AddNumberToObject(o, "alpha_us", 1e6 * ab.alpha_s); /* at the gradients' size */
    cJSON_AddNumberToObject(o, "beta_ns_per_byte", 1e9 * ab.beta_s_per_byte);
    cJSON_AddNumberToObject(o, "link_points", link->points);
    cJSON_AddNumberToObject(o, "link_max_rel_residual", link->max_rel_residual);
    cJSON_AddStringToObject(o, "metrics_exchange", metrics_names[a->metrics]);
    cJSON_AddBoolToObject(o, "sync_bn", a->sync_bn);
    cJSON *buckets = cJSON_AddArrayToObject(o, "buckets");
    for (int k = 0; k < p->sm.n_buckets; k++) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddNumberToObject(b, "bytes", (double)p->buckets.spans[k].numel * a->grad_bytes_per_param);
        cJSON_AddStringToObject(b, "ready_after", p->layer_names[p->buckets.spans[k].ready_layer]);
        cJSON_AddItemToArray(buckets, b);
    }
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
    return o;
}

static void print_header(const predict_args *a, const herd_model *m, const herd_comm_link *link,
                         const herd_predict_plan *p)
{
    printf("%s: %zu parameters, %.0f gradient bytes per step (%s)\n", herd_model_name(m),
           herd_model_param_count(m), p->grad_bytes, a->grad_bytes_per_param == 2 ? "16-bit" : "fp32");
    if (link->points > 0) {
        bool beyond;
        herd_comm_link_segment(link, p->grad_bytes, &beyond);
        printf("link: %d message sizes, %.0f to %.0f bytes, %d ranks, in %s, read as straight lines "
               "between sizes (worst leave-one-out error %.1f%% at %.0f bytes)%s\n", link->points,
               link->bytes[0], link->bytes[link->points - 1], link->ranks, a->bench_file,
               100 * link->max_rel_residual, link->worst_bytes,
               beyond ? "; the gradients are larger than the largest size: extrapolated" : "");
    } else {
        printf("link: alpha %.2f us, beta %.4f ns/byte (%.2f Gbit/s), as given\n",
               1e6 * link->given.alpha_s, 1e9 * link->given.beta_s_per_byte, a->link_gbps);
    }
    if (a->step_ms > 0)
        printf("one worker: step %.3f ms (given), backward %.3f ms (%s)\n", 1e3 * p->step_s,
               1e3 * p->backward_total_s, a->backward_fraction >= 0 ? "given" : "assumed 2/3 of the step");
    else
        printf("one worker: step %.3f ms, forward %.3f ms, backward %.3f ms (measured here: %ld steps "
               "of batch %ld, %ld thread(s))\n", 1e3 * p->step_s, 1e3 * p->sm.forward_s,
               1e3 * p->backward_total_s, a->steps, a->batch, a->threads);
    printf("buckets (reduced in this order, as herd train --bucket-mb %g):", a->bucket_mb);
    for (int k = 0; k < p->sm.n_buckets; k++)
        printf("%s %.0f bytes after %s's backward", k ? "," : "",
               (double)p->buckets.spans[k].numel * a->grad_bytes_per_param,
               p->layer_names[p->buckets.spans[k].ready_layer]);
    printf("; metrics %s%s\n", metrics_names[a->metrics], a->sync_bn ? "; --sync-bn exchanges" : "");
}

/* One pipeline of a->stages stages of the plan's model (herd_predict_plan_pipeline). */
static herd_status predict_pipeline(const predict_args *a, const herd_model *m,
                                    const herd_comm_link *link, const herd_predict_plan *p, cJSON *json)
{
    herd_predict_pipeline_plan pp;
    int P = (int)a->stages, M = (int)a->micro_batches;
    herd_status st = herd_predict_plan_pipeline(m, link, p, P, M, (int)a->batch, a->schedule, &pp);
    if (st != HERD_OK)
        return st;
    const herd_pipeline_model *pm = &pp.pm;
    const herd_pipeline_prediction pr = pp.pr;
    const int *bounds = pp.bounds;
    if (json) {
        cJSON *o = cJSON_AddObjectToObject(json, "pipeline");
        cJSON_AddNumberToObject(o, "stages", P);
        cJSON_AddNumberToObject(o, "micro_batches", M);
        cJSON_AddStringToObject(o, "schedule", herd_pp_schedule_name(a->schedule));
        cJSON_AddNumberToObject(o, "step_ms", 1e3 * pr.step_s);
        cJSON_AddNumberToObject(o, "speedup", p->step_s / pr.step_s);
        cJSON_AddNumberToObject(o, "bubble", pr.bubble);
        cJSON_AddNumberToObject(o, "ideal_bubble", pr.ideal_bubble);
        cJSON_AddNumberToObject(o, "tied_table_ms", 1e3 * pm->tied_s);
        cJSON *list = cJSON_AddArrayToObject(o, "stage_first_layer");
        for (int s = 0; s < P; s++)
            cJSON_AddItemToArray(list, cJSON_CreateString(p->layer_names[bounds[s]]));
        return HERD_OK;
    }
    printf("\npipeline of %d stages, %d micro-batches of %g (%s), split by FLOPs:\n", P, M, pp.micro_batch,
           herd_pp_schedule_name(a->schedule));
    for (int s = 0; s < P; s++) {
        printf("  stage %d: layers %s..%s, forward %.3f ms and backward %.3f ms per micro-batch",
               s, p->layer_names[bounds[s]], p->layer_names[bounds[s + 1] - 1],
               1e3 * pm->forward_s[s], 1e3 * pm->backward_s[s]);
        if (s + 1 < P)
            printf(", %.3f ms each way to stage %d", 1e3 * pm->transfer_s[s], s + 1);
        printf("\n");
    }
    if (pm->tied_s > 0)
        printf("  the token table on stage %d and its copy on stage %d: %.3f ms to exchange their "
               "gradients after the reduction\n", pm->tied_stage, P - 1, 1e3 * pm->tied_s);
    printf("predicted step %.3f ms on %d ranks against one worker's %.3f ms (speed-up %.2f, %.0f%% of %d); "
           "bubble %.3f, ideal %.3f (the time per sample taken not to depend on the batch)\n",
           1e3 * pr.step_s, P, 1e3 * p->step_s, p->step_s / pr.step_s,
           100 * p->step_s / pr.step_s / P, P, pr.bubble, pr.ideal_bubble);
    printf("pipeline_stages=%d micro_batches=%d schedule=%s step_ms=%.3f speedup=%.3f bubble=%.4f "
           "ideal_bubble=%.4f\n", P, M, herd_pp_schedule_name(a->schedule), 1e3 * pr.step_s,
           p->step_s / pr.step_s, pr.bubble, pr.ideal_bubble);
    return HERD_OK;
}

/* One replica of the plan's model split over a->tensor_parallel ranks
 * (herd_predict_plan_tensor). */
static herd_status predict_tensor(const predict_args *a, const herd_model *m,
                                  const herd_comm_link *link, const herd_predict_plan *p, cJSON *json)
{
    herd_predict_tensor_plan tp;
    int T = (int)a->tensor_parallel;
    HERD_TRY(herd_predict_plan_tensor(m, link, p, T, (int)a->batch, &tp));
    double speedup = p->step_s / tp.step_s;
    if (json) {
        cJSON *o = cJSON_AddObjectToObject(json, "tensor_parallel");
        cJSON_AddNumberToObject(o, "parts", T);
        cJSON_AddNumberToObject(o, "step_ms", 1e3 * tp.step_s);
        cJSON_AddNumberToObject(o, "compute_ms", 1e3 * tp.compute_s);
        cJSON_AddNumberToObject(o, "exchange_ms", 1e3 * tp.exchange_s);
        cJSON_AddNumberToObject(o, "sums", tp.sums);
        cJSON_AddNumberToObject(o, "sum_bytes", tp.sum_bytes);
        cJSON_AddNumberToObject(o, "part_params", tp.part_params);
        cJSON_AddNumberToObject(o, "speedup", speedup);
        return HERD_OK;
    }
    printf("\none replica over %d tensor-parallel ranks: compute %.3f ms per part, %d sums a step "
           "(%.1f KiB sent each, %.3f ms), %.0f parameters per rank\n", T, 1e3 * tp.compute_s,
           tp.sums, tp.sum_bytes / 1024 / (tp.sums ? tp.sums : 1), 1e3 * tp.exchange_s,
           tp.part_params);
    printf("predicted step %.3f ms on %d ranks against one worker's %.3f ms (speed-up %.2f, %.0f%% of %d)\n",
           1e3 * tp.step_s, T, 1e3 * p->step_s, speedup, 100 * speedup / T, T);
    printf("tensor_parallel=%d step_ms=%.3f compute_ms=%.3f exchange_ms=%.3f sums=%d speedup=%.3f\n", T,
           1e3 * tp.step_s, 1e3 * tp.compute_s, 1e3 * tp.exchange_s, tp.sums, speedup);
    return HERD_OK;
}

int cmd_predict(int argc, char **argv)
{
    predict_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    herd_comm_link *link = calloc(1, sizeof *link); /* a 4 KiB table: not on the stack */
    if (!link)
        return cli_fail(HERD_ERR_NOMEM, "out of memory");
    herd_status st;
    if (a.bench_file && (st = herd_comm_link_from_bench_file(a.bench_file, link)) != HERD_OK) {
        free(link);
        return cli_fail(st, "cannot read the link from the benchmark");
    }
    if (!a.bench_file)
        *link = herd_comm_link_given(a.latency_us * 1e-6, 8.0 / (a.link_gbps * 1e9));
    herd_dataset *ds = NULL;
    herd_model *m = NULL;
    herd_predict_plan plan = {0};
    herd_predict_row *rows = calloc((size_t)a.workers, sizeof *rows);
    rc = CLI_FAIL;
    herd_bench_result r = {0};
    if (!rows)
        cli_fail(HERD_ERR_NOMEM, "out of memory");
    else if ((st = cli_open_data(a.data, HERD_SPLIT_TRAIN, a.model, (int)a.seq_len, &ds)) != HERD_OK)
        cli_fail(st, "cannot open the data");
    else if ((st = herd_model_create(a.model, ds, &m)) != HERD_OK)
        cli_fail(st, "cannot build the model");
    else if (a.step_ms <= 0 && (st = herd_bench_train(m, ds, (int)a.batch, (int)a.steps, 3,
                                                      (int)a.threads, NULL, &r)) != HERD_OK)
        cli_fail(st, "cannot measure one worker's step");
    else {
        herd_predict_opts po = {.bucket_mb = a.bucket_mb, .grad_bytes_per_param = a.grad_bytes_per_param,
                                .sync_bn = a.sync_bn, .metrics = a.metrics,
                                .step_s = a.step_ms > 0 ? a.step_ms * 1e-3 : 0,
                                .backward_fraction = a.backward_fraction};
        if ((st = herd_predict_plan_build(m, &po, a.step_ms > 0 ? NULL : &r, &plan)) != HERD_OK)
            cli_fail(st, "cannot plan the gradient buckets");
        else if ((st = herd_predict_scaling(link, &plan.sm, plan.grad_bytes, (int)a.workers, rows)) != HERD_OK)
            cli_fail(st, "cannot predict");
        else {
            int n_over = herd_predict_max_workers(rows, (int)a.workers, a.threshold, true);
            int n_plain = herd_predict_max_workers(rows, (int)a.workers, a.threshold, false);
            cJSON *o = a.json ? summary_json(&a, link, &plan, rows, n_over, n_plain) : NULL;
            if (!a.json) {
                print_header(&a, m, link, &plan);
                print_table(&a, rows, n_over, n_plain);
            }
            if (a.stages > 1 && (st = predict_pipeline(&a, m, link, &plan, o)) != HERD_OK)
                cli_fail(st, "cannot predict the pipeline");
            else if (a.tensor_parallel > 1 &&
                     (st = predict_tensor(&a, m, link, &plan, o)) != HERD_OK)
                cli_fail(st, "cannot predict tensor parallelism");
            else
                rc = CLI_OK;
            if (o)
                cli_print_json(o);
        }
    }
    herd_predict_plan_free(&plan);
    free(rows);
    free(link);
    herd_model_free(m);
    herd_dataset_free(ds);
    return rc;
}
