/* herd plot: PNG curves from a --metrics file, or step-time bars from a --timeline trace. */
#include <getopt.h>
#include <stdio.h>

#include "cli.h"
#include "tools/paths.h"

static const char plot_help[] =
    "usage: herd plot METRICS.jsonl -o curves.png [--metric loss,acc,throughput]\n"
    "       herd plot --timeline TRACE.json -o steps.png\n"
    "\n"
    "Draw a PNG (with PLplot) from the files herd train writes.\n"
    "\n"
    "  METRICS.jsonl            a 'herd train --metrics' file: one panel per metric against\n"
    "                           the step: loss and accuracy (train as the mean over each\n"
    "                           log interval, test at each epoch end) and training samples/s\n"
    "  --timeline TRACE.json    a 'herd train --timeline' trace instead: per rank, the mean\n"
    "                           ms per step in data wait, forward, backward, exposed\n"
    "                           communication and optimizer, as stacked bars\n"
    "  -o, --output FILE        the PNG to write (required)\n"
    "  --metric LIST            panels, comma-separated: loss, acc, throughput (all)\n"
    "  --width W, --height H    size in pixels (1000 wide; 300 high per panel, or 240 +\n"
    "                           45 per rank for --timeline)\n";

enum { OPT_TIMELINE = 256, OPT_METRIC, OPT_WIDTH, OPT_HEIGHT, OPT_HELP };

static const struct option plot_options[] = {
    {"timeline", required_argument, 0, OPT_TIMELINE},
    {"output", required_argument, 0, 'o'},
    {"metric", required_argument, 0, OPT_METRIC},
    {"width", required_argument, 0, OPT_WIDTH},
    {"height", required_argument, 0, OPT_HEIGHT},
    {"help", no_argument, 0, OPT_HELP},
    {0, 0, 0, 0},
};

int cmd_plot(int argc, char **argv)
{
    const char *timeline = NULL, *output = NULL, *metric = NULL;
    long width = 0, height = 0;
    optind = 1;
    int opt;
    while ((opt = cli_getopt(argc, argv, "o:", plot_options, NULL)) != -1) {
        switch (opt) {
        case OPT_TIMELINE: timeline = optarg; break;
        case 'o': output = optarg; break;
        case OPT_METRIC: metric = optarg; break;
        case OPT_WIDTH:
            if (!herd_parse_long(optarg, 200, 20000, &width))
                return cli_usage_error("plot", "--width is pixels in [200, 20000], got '%s'", optarg);
            break;
        case OPT_HEIGHT:
            if (!herd_parse_long(optarg, 150, 20000, &height))
                return cli_usage_error("plot", "--height is pixels in [150, 20000], got '%s'", optarg);
            break;
        case OPT_HELP: fputs(plot_help, stdout); return CLI_OK;
        default: return cli_usage_error("plot", "unknown or incomplete option");
        }
    }
    const char *metrics = optind < argc ? argv[optind++] : NULL;
    if (optind < argc)
        return cli_usage_error("plot", "unexpected argument '%s'", argv[optind]);
    if (!output)
        return cli_usage_error("plot", "-o FILE.png is required");
    if (!timeline == !metrics)
        return cli_usage_error("plot", "give either a metrics file or --timeline TRACE, not %s",
                               timeline ? "both" : "neither");
    if (herd_same_file(output, timeline ? timeline : metrics))
        return cli_usage_error("plot", "-o '%s' is the %s it would plot: the PNG would replace it; "
                               "name another file", output, timeline ? "trace" : "metrics file");
    if (timeline && metric)
        return cli_usage_error("plot", "--metric chooses panels of a metrics plot, not of --timeline");
    herd_status st = timeline ? herd_plot_timeline(timeline, output, (int)width, (int)height)
                              : herd_plot_metrics(metrics, output, metric, (int)width, (int)height);
    if (st != HERD_OK)
        return cli_fail(st, "cannot plot");
    fprintf(stderr, "herd: wrote %s\n", output);
    return CLI_OK;
}
