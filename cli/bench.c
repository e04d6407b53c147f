/* herd bench train: training throughput with the step broken into phases. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char bench_help[] =
    "usage: herd bench train --model MODEL [options]\n"
    "\n"
    "Times training steps (after warm-up) and prints samples/s and the mean time per\n"
    "phase of a step: data wait (blocked on the loader), forward (incl. loss), backward,\n"
    "optimizer.\n"
    "\n"
    "  --model MODEL        zoo name or model file (required)\n"
    "  --data DATA          fashion-mnist (default), synthetic:C,H,W,CLASSES[,N], ...\n"
    "  --seq-len T          token data: tokens per sample (default: the model's context);\n"
    "                       the summary adds tokens_per_s\n"
    "  --batch-size N       (default 128)\n"
    "  --steps N            timed steps (default 50)\n"
    "  --warmup N           untimed steps first (default 5)\n"
    "  --threads N          compute threads (default 1)\n"
    "  --lr X               SGD's learning rate (default 0.05, as herd train's); a small\n"
    "                       batch may diverge on it, which ends the benchmark\n"
    "  --device cpu|cuda|sim  where to train (default: cuda when a GPU is visible, else cpu;\n"
    "                       sim: a simulated device for tests, see 'herd train --help')\n"
    "  --precision P        fp32 (default), tf32 (cuda), bf16 (cuda, or a cpu with bf16\n"
    "                       instructions) or fp16 (cuda)\n"
    "  --gpu-memory-limit SIZE  cap herd's GPU memory, e.g. 20G (cuda and sim only)\n"
    "  --memory-limit SIZE  cap herd's memory on the model's device, e.g. 300M (as in\n"
    "                       'herd train --help')\n"
    "  --tensor-parallel T  split the model over groups of T ranks, as 'herd train\n"
    "                       --tensor-parallel' does (batch per replica; no one-rank baseline)\n"
    "  --cuda-graphs        replay each step's forward and backward from CUDA graphs (as\n"
    "                       'herd train --cuda-graphs')\n"
    "  --recompute          re-compute activations in backward (as 'herd train --recompute')\n"
    "  --loss-chunk N       the last layer and the loss N samples at a time (as 'herd train\n"
    "                       --loss-chunk')\n"
    "  --timeline FILE      trace the steps of all ranks (Chrome trace JSON, see\n"
    "                       'herd train --help'); with several ranks, not rank 0's solo baseline\n"
    "  --json               print the summary as a JSON object\n"
    "\n"
    "gflops is the achieved training arithmetic: 3 x the model's forward FLOPs per sample\n"
    "(herd models) x samples/s. On a GPU, tflops is the same figure per rank and\n"
    "peak_tflops the device's peak at this precision (docs/performance.md; 0 = unknown).\n";

static int bench_train(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"data", required_argument, 0, 'd'},
        {"batch-size", required_argument, 0, 'b'}, {"steps", required_argument, 0, 's'},
        {"warmup", required_argument, 0, 'w'}, {"threads", required_argument, 0, 't'},
        {"json", no_argument, 0, 'j'}, {"device", required_argument, 0, 'D'},
        {"precision", required_argument, 0, 'P'}, {"gpu-memory-limit", required_argument, 0, 'G'},
        {"memory-limit", required_argument, 0, 'L'},
        {"timeline", required_argument, 0, 'T'}, {"seq-len", required_argument, 0, 'S'},
        {"tensor-parallel", required_argument, 0, 'X'}, {"lr", required_argument, 0, 'r'},
        {"cuda-graphs", no_argument, 0, 'g'}, {"recompute", no_argument, 0, 'R'},
        {"loss-chunk", required_argument, 0, 'C'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *model = NULL, *data = "fashion-mnist", *device = NULL;
    herd_precision precision = HERD_PRECISION_FP32;
    uint64_t gpu_memory_limit = 0, memory_limit = 0;
    const char *timeline = NULL;
    long batch = 128, steps = 50, warmup = 5, threads = 1, seq_len = 0, tensor_parallel = 1,
         loss_chunk = 0;
    double lr = 0.0; /* herd_bench_config's default */
    bool json = false, cuda_graphs = false, recompute = false;
    int opt;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "", opts, NULL)) != -1) {
        long *dst = NULL;
        long lo = 1;
        switch (opt) {
        case 'm': model = optarg; break;
        case 'd': data = optarg; break;
        case 'b': dst = &batch; break;
        case 's': dst = &steps; break;
        case 'w': dst = &warmup, lo = 0; break;
        case 't': dst = &threads, lo = 0; break;
        case 'S': dst = &seq_len; break;
        case 'X': dst = &tensor_parallel; break;
        case 'C': dst = &loss_chunk, lo = 0; break;
        case 'j': json = true; break;
        case 'g': cuda_graphs = true; break;
        case 'R': recompute = true; break;
        case 'D': device = optarg; break;
        case 'P':
            if (herd_precision_parse(optarg, &precision) != HERD_OK)
                return cli_usage_error("bench train", "--precision is fp32, tf32, bf16 or fp16, "
                                       "got '%s'", optarg);
            break;
        case 'G':
            if (!herd_parse_size(optarg, 1 << 20, UINT64_MAX, &gpu_memory_limit))
                return cli_usage_error("bench train", "--gpu-memory-limit takes a size of at "
                                       "least 1M like 512M or 20G, got '%s'", optarg);
            break;
        case 'L':
            if (!herd_parse_size(optarg, 1 << 20, UINT64_MAX, &memory_limit))
                return cli_usage_error("bench train", "--memory-limit takes a size of at least "
                                       "1M like 300M or 4G, got '%s'", optarg);
            break;
        case 'T': timeline = optarg; break;
        case 'r':
            if (!herd_parse_double(optarg, 1e-12, 1e3, &lr))
                return cli_usage_error("bench train", "--lr takes a number in 1e-12..1000, got "
                                       "'%s'", optarg);
            break;
        case 'h': fputs(bench_help, stdout); return CLI_OK;
        default: return cli_usage_error("bench train", "unknown or incomplete option");
        }
        if (dst && !herd_parse_long(optarg, lo, 1L << 30, dst))
            return cli_usage_error("bench train", "expected an integer >= %ld, got '%s'", lo, optarg);
    }
    if (optind < argc)
        return cli_usage_error("bench train", "unexpected argument '%s'", argv[optind]);
    if (!model)
        return cli_usage_error("bench train", "--model is required");
    int rc = cli_resolve_device("bench train", &device, gpu_memory_limit, memory_limit);
    if (rc >= 0)
        return rc;
    herd_dataset *ds = NULL;
    herd_model *m = NULL;
    herd_dist *dist = NULL;
    herd_bench_result r;
    herd_status st;
    rc = CLI_FAIL;
    if ((st = herd_dist_init(NULL, &dist)) != HERD_OK)
        return cli_fail(st, "cannot join the distributed job");
    bool rank0 = herd_dist_rank(dist) == 0;
    if ((st = cli_prepare_device(dist, device, (int)threads, gpu_memory_limit)) != HERD_OK)
        cli_fail(st, "cannot use the device");
    else if (memory_limit && (st = herd_device_set_memory_limit(device, memory_limit)) != HERD_OK)
        cli_fail(st, "--memory-limit");
    else if ((st = cli_open_data(data, HERD_SPLIT_TRAIN, model, seq_len, &ds)) != HERD_OK)
        cli_fail(st, "cannot open the data");
    /* Tensor parts build their own parameters: no rank holds the whole model. */
    else if ((st = tensor_parallel > 1 ? herd_model_create_plan(model, ds, device, &m)
                                       : herd_model_create_device(model, ds, device, &m)) != HERD_OK)
        cli_fail(st, "cannot build the model");
    else if ((st = herd_model_set_precision(m, precision)) != HERD_OK)
        cli_fail(st, "--precision");
    else if ((st = herd_bench_run(m, ds,
                                  &(herd_bench_config){.batch_size = (int)batch, .steps = (int)steps,
                                                       .warmup = (int)warmup, .threads = (int)threads,
                                                       .dist = dist, .timeline_path = timeline,
                                                       .tensor_parallel = (int)tensor_parallel,
                                                       .lr = (float)lr, .cuda_graphs = cuda_graphs,
                                                       .recompute = recompute,
                                                       .loss_chunk = (int)loss_chunk},
                                  &r)) != HERD_OK)
        cli_fail(st, "benchmark failed");
    else {
        double gflops = 3.0 * herd_model_flops_per_sample(m) * r.samples_per_s / 1e9;
        bool gpu = strcmp(herd_model_device(m), "cpu") != 0;
        double tflops = gflops / 1e3 / r.ranks; /* per device */
        if (!json && rank0 && gpu) {
            char peak[96] = "peak unknown for this GPU";
            if (r.peak_tflops > 0)
                snprintf(peak, sizeof peak, "%.0f%% of its %.1f TFLOP/s %s peak",
                         100 * tflops / r.peak_tflops, r.peak_tflops,
                         herd_precision_name(precision));
            fprintf(stderr, "%s (%s): %.2f TFLOP/s per GPU achieved, %s\n", r.device_name,
                    herd_precision_name(precision), tflops, peak);
        }
        if (!json && rank0)
            fprintf(stderr,
                    "%s: %d rank(s) x batch %d, %d thread(s), %ld steps: %.2f ms/step (data wait "
                    "%.2f, forward %.2f, backward %.2f, exposed communication %.2f, optimizer %.2f "
                    "ms), ~%.1f GFLOP/s\n",
                    herd_model_name(m), r.ranks, r.batch_size, r.threads, r.steps, 1e3 * r.step_s,
                    1e3 * r.phases.data_wait, 1e3 * r.phases.forward, 1e3 * r.phases.backward,
                    1e3 * r.phases.comm_wait, 1e3 * r.phases.optimizer, gflops);
        cli_summary s = {0};
        cli_summary_str(&s, "model", herd_model_name(m));
        cli_summary_num(&s, "batch", r.batch_size, 0);
        cli_summary_num(&s, "threads", r.threads, 0);
        cli_summary_num(&s, "steps", (double)r.steps, 0);
        cli_summary_num(&s, "step_ms", 1e3 * r.step_s, 3);
        cli_summary_num(&s, "data_wait_ms", 1e3 * r.phases.data_wait, 3);
        cli_summary_num(&s, "forward_ms", 1e3 * r.phases.forward, 3);
        cli_summary_num(&s, "backward_ms", 1e3 * r.phases.backward, 3);
        cli_summary_num(&s, "comm_wait_ms", 1e3 * r.phases.comm_wait, 3);
        cli_summary_num(&s, "optimizer_ms", 1e3 * r.phases.optimizer, 3);
        cli_summary_num(&s, "gflops", gflops, 1);
        cli_summary_num(&s, "param_bytes", (double)r.state_bytes.params, 0);
        cli_summary_num(&s, "grad_bytes", (double)r.state_bytes.grads, 0);
        cli_summary_num(&s, "optimizer_state_bytes", (double)r.state_bytes.optimizer_state, 0);
        cli_summary_str(&s, "device", herd_model_device(m));
        cli_summary_str(&s, "precision", herd_precision_name(precision));
        if (gpu) {
            cli_summary_num(&s, "tflops", tflops, 2);
            cli_summary_num(&s, "peak_tflops", r.peak_tflops, 1);
        }
        cli_summary_num(&s, "ranks", r.ranks, 0);
        if (tensor_parallel > 1)
            cli_summary_num(&s, "tensor_parallel", (double)tensor_parallel, 0);
        if (r.ranks > 1 && r.single_rank_samples_per_s > 0) {
            cli_summary_num(&s, "single_rank_samples_per_s", r.single_rank_samples_per_s, 1);
            cli_summary_num(&s, "scaling_efficiency", r.scaling_efficiency, 4);
        }
        int tokens = herd_dataset_seq_len(ds, NULL);
        if (tokens > 0) { /* a language model: samples are sequences */
            cli_summary_num(&s, "seq_len", tokens, 0);
            cli_summary_num(&s, "tokens_per_s", r.samples_per_s * tokens, 1);
        }
        cli_summary_num(&s, "samples_per_s", r.samples_per_s, 1);
        if (rank0)
            cli_summary_print(&s, json);
        rc = CLI_OK;
    }
    if (rc != CLI_OK && herd_dist_size(dist) > 1)
        herd_dist_abort(dist, rc, "herd bench failed on this rank; stopping the job");
    herd_model_free(m);
    herd_dataset_free(ds);
    herd_dist_free(dist);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        printf("usage: herd bench <what> [options]\n\n"
               "  train      training throughput (herd bench train --help)\n"
               "  allreduce  allreduce time and bandwidth per size, verified (nccl-tests style)\n"
               "  p2p        bandwidth and latency between every pair of ranks and of GPUs\n"
               "  pipeline   the bubble of a pipeline schedule with synthetic stages\n");
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (strcmp(argv[1], "train") == 0)
        return bench_train(argc - 1, argv + 1);
    if (strcmp(argv[1], "allreduce") == 0)
        return cmd_bench_allreduce(argc - 1, argv + 1);
    if (strcmp(argv[1], "p2p") == 0)
        return cmd_bench_p2p(argc - 1, argv + 1);
    if (strcmp(argv[1], "pipeline") == 0)
        return cmd_bench_pipeline(argc - 1, argv + 1);
    fprintf(stderr, "herd: error: unknown benchmark '%s'; try train, allreduce, p2p or pipeline\n", argv[1]);
    return CLI_USAGE;
}
