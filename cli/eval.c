/* herd eval: load weights and report loss and accuracy on a dataset's test split. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char eval_help[] =
    "usage: herd eval --model MODEL --checkpoint FILE [--data DATA] [options]\n"
    "\n"
    "  --model MODEL        zoo name or model file the weights belong to (required)\n"
    "  --checkpoint FILE    weights (.safetensors, from --save or --checkpoint-dir), or a\n"
    "                       --checkpoint-dir: its newest checkpoint (required)\n"
    "  --data DATA          dataset spec (default fashion-mnist; see herd train --help)\n"
    "  --split train|test   which split to evaluate (default test)\n"
    "  --batch-size N       (default 256)\n"
    "  --seq-len T          token data: tokens per sample (default: the model's context)\n"
    "  --device cpu|cuda|sim where to evaluate (default: cuda when a GPU is visible, else cpu);\n"
    "                       the weights load on any device, whichever one wrote them\n"
    "  --threads N          (default: OMP_NUM_THREADS, else the cores shared among the\n"
    "                       ranks on this host)\n"
    "  --json               print the summary as a JSON object\n"
    "\n"
    "Under herd run -np N (or mpirun) each rank evaluates its part of the split and rank 0\n"
    "prints the whole split's result.\n";

/* A --checkpoint-dir given as --checkpoint: its newest checkpoint's weights, named on
 * stderr so the summary says what it measured. */
static herd_status checkpoint_file(const char **ckpt, char *latest, size_t cap, bool say)
{
    struct stat sb;
    if (stat(*ckpt, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return HERD_OK;
    herd_status st = herd_checkpoint_latest_weights(*ckpt, latest, cap);
    if (st != HERD_OK)
        return st;
    if (say)
        fprintf(stderr, "herd eval: %s (the newest checkpoint in %s)\n", latest, *ckpt);
    *ckpt = latest;
    return HERD_OK;
}

int cmd_eval(int argc, char **argv)
{
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'}, {"checkpoint", required_argument, 0, 'c'},
        {"data", required_argument, 0, 'd'},  {"split", required_argument, 0, 's'},
        {"batch-size", required_argument, 0, 'b'}, {"threads", required_argument, 0, 't'},
        {"device", required_argument, 0, 'v'}, {"json", no_argument, 0, 'j'},
        {"seq-len", required_argument, 0, 'L'},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *model = NULL, *ckpt = NULL, *data = "fashion-mnist", *device = NULL;
    herd_split split = HERD_SPLIT_TEST;
    long batch = 256, threads = 0, seq_len = 0;
    bool json = false;
    int opt;
    optind = 1;
    while ((opt = cli_getopt(argc, argv, "", opts, NULL)) != -1) {
        switch (opt) {
        case 'm': model = optarg; break;
        case 'c': ckpt = optarg; break;
        case 'd': data = optarg; break;
        case 's':
            if (strcmp(optarg, "train") && strcmp(optarg, "test"))
                return cli_usage_error("eval", "--split is train or test, got '%s'", optarg);
            split = strcmp(optarg, "train") == 0 ? HERD_SPLIT_TRAIN : HERD_SPLIT_TEST;
            break;
        case 'b':
            if (!herd_parse_long(optarg, 1, 1 << 20, &batch))
                return cli_usage_error("eval", "--batch-size must be a positive integer, got '%s'", optarg);
            break;
        case 't':
            if (!herd_parse_long(optarg, 0, 4096, &threads))
                return cli_usage_error("eval", "--threads must be an integer >= 0, got '%s'", optarg);
            break;
        case 'v': device = optarg; break;
        case 'L':
            if (!herd_parse_long(optarg, 1, 1L << 24, &seq_len))
                return cli_usage_error("eval", "--seq-len must be a positive integer, got '%s'", optarg);
            break;
        case 'j': json = true; break;
        case 'h': fputs(eval_help, stdout); return CLI_OK;
        default: return cli_usage_error("eval", "unknown or incomplete option");
        }
    }
    if (optind < argc)
        return cli_usage_error("eval", "unexpected argument '%s'", argv[optind]);
    if (!model || !ckpt)
        return cli_usage_error("eval", "--model and --checkpoint are required");
    int urc = cli_resolve_device("eval", &device, 0, 0);
    if (urc >= 0)
        return urc;
    herd_dataset *ds = NULL;
    herd_model *m = NULL;
    herd_dist *dist = NULL;
    herd_status st;
    int rc = CLI_FAIL;
    herd_eval_result r;
    char latest[4096];
    /* Under herd run or mpirun the ranks share the set: each evaluates its part. */
    if ((st = herd_dist_init(NULL, &dist)) != HERD_OK)
        cli_fail(st, "cannot join the distributed job");
    else if ((st = cli_prepare_device(dist, device, (int)threads, 0)) != HERD_OK)
        cli_fail(st, "--threads");
    else if ((st = cli_open_data(data, split, model, seq_len, &ds)) != HERD_OK)
        cli_fail(st, "cannot open the data");
    else if ((st = herd_model_create_device(model, ds, device, &m)) != HERD_OK)
        cli_fail(st, "cannot build the model");
    else if ((st = checkpoint_file(&ckpt, latest, sizeof latest,
                                     herd_dist_rank(dist) == 0)) != HERD_OK)
        cli_fail(st, "no checkpoint to evaluate");
    else if ((st = herd_model_load(m, ckpt)) != HERD_OK)
        cli_fail(st, "cannot load the weights");
    else if ((st = herd_evaluate_dist(m, ds, (int)batch, (int)threads, dist, &r)) != HERD_OK)
        cli_fail(st, "evaluation failed");
    else if (herd_dist_rank(dist) != 0)
        rc = CLI_OK;
    else {
        cli_summary s = {0};
        cli_summary_str(&s, "model", herd_model_name(m));
        cli_summary_str(&s, "split", split == HERD_SPLIT_TEST ? "test" : "train");
        cli_summary_num(&s, "samples", (double)r.samples, 0);
        cli_summary_num(&s, "loss", r.loss, 4);
        cli_summary_num(&s, "acc", r.acc, 4);
        if (herd_dataset_seq_len(ds, NULL) > 0) /* the loss is per token */
            cli_summary_num(&s, "perplexity", exp(r.loss), 4);
        cli_summary_print(&s, json);
        rc = CLI_OK;
    }
    /* One failing rank must not leave the others waiting in the evaluation's sums. */
    if (rc != CLI_OK && dist && herd_dist_size(dist) > 1)
        herd_dist_abort(dist, rc, "herd eval failed on this rank; stopping the job");
    herd_model_free(m);
    herd_dataset_free(ds);
    herd_dist_free(dist);
    return rc;
}
